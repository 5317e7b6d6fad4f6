//! Extractors whose rejections are the API's JSON errors (`invalid`, `too_large`) instead of
//! axum's plain-text ones.

use std::marker::PhantomData;

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use crewbus_domain::BusError;
use serde::de::value::MapAccessDeserializer;
use serde::de::{Deserialize, DeserializeOwned, Deserializer, MapAccess, Visitor};

use crate::edge::body_limit::REQUEST_LIMIT_BYTES;
use crate::edge::error::ApiError;

/// `Json<T>` answering malformed JSON with `400 invalid` and an oversize request with
/// `413 too_large`. The body must be a JSON object ([`Object`]).
pub struct ApiJson<T>(pub T);

/// A request body struct read only from a JSON object. serde's derived structs also take a JSON
/// array of their fields in order (`["id", "text"]` as a send), which the document does not
/// allow; this refuses anything but an object (`400 invalid`, "request body does not fit").
struct Object<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Fields<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(Fields(PhantomData)).map(Object)
    }
}

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let declared = req
            .headers()
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        match axum::Json::<Object<T>>::from_request(req, state).await {
            Ok(axum::Json(Object(v))) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection, declared)),
        }
    }
}

fn json_rejection(rejection: JsonRejection, declared: Option<u64>) -> ApiError {
    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError(BusError::TooLarge {
            size: declared.unwrap_or(REQUEST_LIMIT_BYTES as u64 + 1),
            limit: REQUEST_LIMIT_BYTES as u64,
        });
    }
    let reason = match &rejection {
        JsonRejection::MissingJsonContentType(_) => {
            "expected `Content-Type: application/json`".to_owned()
        }
        JsonRejection::JsonSyntaxError(_) => "request body is not valid JSON".to_owned(),
        // serde's own words ("mode: invalid type: null, …"), not axum's wrapping of them.
        JsonRejection::JsonDataError(e) => format!(
            "request body does not fit: {}",
            std::error::Error::source(e).map_or_else(|| e.body_text(), |s| s.to_string())
        ),
        _ => "request body could not be read".to_owned(),
    };
    ApiError(BusError::invalid(reason))
}

/// `Path<T>` answering an unparsable id with `400 invalid`.
pub struct ApiPath<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiPath<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Send,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Path::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(v)) => Ok(ApiPath(v)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: PathRejection) -> ApiError {
    let reason = match &rejection {
        PathRejection::FailedToDeserializePathParams(e) => {
            format!("bad id in the path: {}", e.body_text())
        }
        _ => "bad path".to_owned(),
    };
    ApiError(BusError::invalid(reason))
}

/// `Query<T>` answering bad pagination with `400 invalid`.
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(v)) => Ok(ApiQuery(v)),
            Err(rejection) => Err(query_rejection(rejection)),
        }
    }
}

fn query_rejection(rejection: QueryRejection) -> ApiError {
    let reason = match &rejection {
        QueryRejection::FailedToDeserializeQueryString(e) => {
            format!("bad query: {}", e.body_text())
        }
        _ => "bad query".to_owned(),
    };
    ApiError(BusError::invalid(reason))
}

/// A JSON body that may be left out entirely: an empty body, or JSON `null` (what the document
/// allows for an optional body), is `T::default()`. Malformed JSON is `400 invalid`; an
/// oversize body `413 too_large`.
pub struct ApiJsonOrDefault<T>(pub T);

impl<S, T> FromRequest<S> for ApiJsonOrDefault<T>
where
    S: Send + Sync,
    T: DeserializeOwned + Default,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = match axum::body::Bytes::from_request(req, state).await {
            Ok(b) => b,
            Err(rejection) => {
                return Err(if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError(BusError::TooLarge {
                        size: REQUEST_LIMIT_BYTES as u64 + 1,
                        limit: REQUEST_LIMIT_BYTES as u64,
                    })
                } else {
                    ApiError(BusError::invalid("request body could not be read"))
                });
            }
        };
        if bytes.iter().all(u8::is_ascii_whitespace) || bytes.trim_ascii() == b"null" {
            return Ok(ApiJsonOrDefault(T::default()));
        }
        serde_json::from_slice::<Object<T>>(&bytes)
            .map(|Object(v)| ApiJsonOrDefault(v))
            .map_err(|e| {
                ApiError(BusError::invalid(if e.is_syntax() || e.is_eof() {
                    "request body is not valid JSON".to_owned()
                } else {
                    format!("request body does not fit: {e}")
                }))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::edge::views::{AcknowledgeRequest, FetchRequest, SendMessage};

    fn object<T: DeserializeOwned>(json: &str) -> Result<T, serde_json::Error> {
        serde_json::from_str::<Object<T>>(json).map(|Object(v)| v)
    }

    #[test]
    fn a_request_body_is_an_object_never_an_array_of_its_fields() {
        let sent: SendMessage = object(r#"{"request_id": "r1", "body": "hi"}"#).unwrap();
        assert_eq!((sent.request_id.as_str(), sent.body.as_str()), ("r1", "hi"));
        // serde's derived struct alone takes this; the API does not.
        assert!(serde_json::from_str::<SendMessage>(r#"["r1", "hi"]"#).is_ok());
        assert!(
            object::<SendMessage>(r#"["r1", "hi"]"#)
                .unwrap_err()
                .is_data()
        );
        assert!(object::<FetchRequest>("[]").unwrap_err().is_data());
        assert!(object::<AcknowledgeRequest>("5").unwrap_err().is_data());
        // Unknown fields are still refused through the wrapper.
        assert!(object::<AcknowledgeRequest>(r#"{"other": 1}"#).is_err());
        assert!(object::<AcknowledgeRequest>("{}").unwrap().run.is_none());
    }

    #[tokio::test]
    async fn a_body_that_does_not_fit_is_told_in_serdes_words_naming_the_field() {
        use crate::edge::leases::AcquireLease;
        let request = Request::builder()
            .method("POST")
            .header(axum::http::header::CONTENT_TYPE, "application/json")
            .body(axum::body::Body::from(
                r#"{"pattern": "q/**", "mode": null}"#,
            ))
            .unwrap();
        let Err(ApiError(BusError::Invalid { reason })) =
            ApiJson::<AcquireLease>::from_request(request, &()).await
        else {
            panic!("mode: null is refused as invalid");
        };
        assert!(
            reason.starts_with("request body does not fit: mode: "),
            "{reason}"
        );
        assert!(!reason.contains("Failed to deserialize"), "{reason}");
    }

    #[test]
    fn an_enum_field_of_another_type_does_not_fit_its_body_is_still_valid_json() {
        use crate::edge::leases::AcquireLease;
        use crate::edge::views::SealRequest;
        // serde_json reads a derived enum from a string or an object only, and calls any other
        // value a syntax error: answered "request body is not valid JSON" (issue 33 item 7).
        for mode in ["null", "5", "[]", "true"] {
            let body = format!(r#"{{"pattern": "q/**", "mode": {mode}}}"#);
            let e = object::<AcquireLease>(&body).unwrap_err();
            assert!(e.is_data(), "{body}: {e}");
        }
        let e = object::<AcquireLease>(r#"{"pattern": "q/**", "mode": "loose"}"#).unwrap_err();
        assert!(e.is_data(), "{e}");
        for outcome in ["null", "1"] {
            let body = format!(r#"{{"outcome": {outcome}}}"#);
            let e = object::<SealRequest>(&body).unwrap_err();
            assert!(e.is_data(), "{body}: {e}");
        }
        // Names still read as before.
        let a: AcquireLease = object(r#"{"pattern": "q/**", "mode": "shared"}"#).unwrap();
        assert_eq!(a.mode, crate::edge::leases::LeaseModeView::Shared);
        let s: SealRequest = object(r#"{"outcome": "cancelled"}"#).unwrap();
        assert_eq!(s.outcome, crate::edge::views::Outcome::Cancelled);
        // Every variant reads back the name it is written with.
        use crate::edge::leases::LeaseModeView as M;
        use crate::edge::views::Outcome as O;
        for m in [M::Exclusive, M::Shared] {
            assert_eq!(
                serde_json::from_value::<M>(serde_json::to_value(m).unwrap()).unwrap(),
                m
            );
        }
        for o in [O::Succeeded, O::Failed, O::Cancelled] {
            assert_eq!(
                serde_json::from_value::<O>(serde_json::to_value(o).unwrap()).unwrap(),
                o
            );
        }
    }
}
