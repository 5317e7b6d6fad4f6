//! `GET /v1/me` and `POST /v1/conversations`.

use axum::Json;
use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use serde_json::json;
use uuid::Uuid;

use crate::app::{Answer, Shared, body, refuse, unavailable};

pub(crate) async fn me(State(app): Shared, headers: HeaderMap) -> Answer {
    let id = app.agent(&headers)?;
    Ok(Json(json!({"id": id, "team": app.team})).into_response())
}

#[derive(Deserialize)]
pub(crate) struct NewConversation {
    title: String,
    #[serde(default)]
    members: Vec<Uuid>,
}

pub(crate) async fn create_conversation(
    State(app): Shared,
    headers: HeaderMap,
    req: Result<Json<NewConversation>, JsonRejection>,
) -> Answer {
    let owner = app.agent(&headers)?;
    let req = body(req)?;
    let mut members: Vec<Uuid> = vec![owner];
    for m in req.members {
        if !app.tokens.values().any(|a| *a == m) {
            return Err(refuse(
                StatusCode::BAD_REQUEST,
                "invalid",
                "a member is not an agent",
            ));
        }
        if !members.contains(&m) {
            members.push(m);
        }
    }
    let id = Uuid::new_v4();
    let done = sqlx::query(
        "WITH c AS (INSERT INTO raw_conversations (id, title) VALUES ($1, $2)) \
         INSERT INTO raw_members (conversation, agent) SELECT $1, unnest($3::uuid[])",
    )
    .bind(id)
    .bind(&req.title)
    .bind(&members)
    .execute(&app.pool)
    .await;
    done.map_err(unavailable)?;
    Ok((
        StatusCode::CREATED,
        Json(json!({"id": id, "title": req.title, "members": members})),
    )
        .into_response())
}
