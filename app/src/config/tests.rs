//! The configuration's tests: defaults, sources and their order, and every refusal.

use super::*;

#[test]
fn embedded_default_is_the_sqlite_store_on_loopback() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.listen.to_string(), DEFAULT_LISTEN);
    assert!(c.database.is_none() && c.nats.is_none());
    assert_eq!(c.bus.max_body_bytes, MAX_BODY_BYTES);
    assert_eq!(c.store().unwrap(), StorageKind::Sqlite);
    assert!(c.describe().starts_with("ledger=sqlite"));
    let memory = Config::from_toml("[storage]\nkind = \"memory\"").unwrap();
    assert_eq!(memory.store().unwrap(), StorageKind::Memory);
    assert!(memory.describe().starts_with("ledger=memory"));
}

#[test]
fn a_store_contradicting_the_database_section_is_refused() {
    let err =
        Config::from_toml("[storage]\nkind = \"sqlite\"\n[database]\nurl = \"postgres://h/db\"")
            .unwrap_err();
    assert!(matches!(err, BusError::Invalid { .. }), "{err:?}");
    let err = Config::from_toml("[storage]\nkind = \"postgres\"").unwrap_err();
    assert!(matches!(err, BusError::Invalid { .. }), "{err:?}");
    let err = Config::from_toml("[storage]\nkind = \"tape\"").unwrap_err();
    assert!(matches!(err, BusError::Invalid { .. }), "{err:?}");
}

#[test]
fn the_example_file_parses() {
    let text = include_str!("../../../crewbus.example.toml");
    let c = Config::from_toml(text).unwrap();
    assert!(c.database.is_some());
    assert!(c.nats.is_some());
    assert!(!c.push.allow_unsealed);
    assert_eq!(c.push.poll_ms, 250);
    assert_eq!(c.bus.shutdown_grace_ms, 10_000);
    assert_eq!(c.bus.request_body_timeout_ms, 30_000);
    assert_eq!(c.bus.header_read_timeout_ms, 10_000);
    assert_eq!(c.bus.max_http_connections, 4_096);
    assert_eq!(c.bus.max_wait_ms, 50_000);
    assert_eq!(c.bus.max_fetch_bytes, 16 << 20);
    assert_eq!(c.bus.max_body_bytes_in_flight, 64 << 20);
    assert_eq!(c.log.format, "text");
    assert_eq!(c.rate_limit, RateLimitConfig::default());
    // Every [push] key of the example is documented commented-in or out; the commented
    // destination parses too once uncommented.
    let uncommented = text
        .lines()
        .map(|l| {
            let t = l.trim_start();
            if t.starts_with("# [push.key_ring]")
                || t.starts_with("# master_key_file")
                || t.starts_with("# dir =")
                || t.starts_with("# [[push.destinations]]")
                || t.starts_with("# name =")
                || t.starts_with("# url =")
                || t.starts_with("# authentication =")
                || t.starts_with("# signing_keys =")
                || t.starts_with("# listen_url =")
            {
                t.trim_start_matches("# ").to_owned()
            } else {
                l.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let c = Config::from_toml(&uncommented).unwrap();
    assert_eq!(c.push.destinations.len(), 1);
    assert!(c.push.key_ring.is_some());
    assert!(c.database.as_ref().unwrap().listen_url.is_some());
}

#[test]
fn unknown_keys_and_bad_values_are_invalid() {
    assert!(matches!(
        Config::from_toml("listne = \"x\""),
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        Config::from_toml("[bus]\nmax_body_bytes = 5000000"),
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        Config::from_toml("[database]\nurl = \"mysql://x\""),
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        Config::from_toml("[log]\nlevel = \"nonsense==\""),
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        Config::from_toml("[log]\nformat = \"xml\""),
        Err(BusError::Invalid { .. })
    ));
    assert!(matches!(
        Config::from_toml("[bus]\nrequest_body_timeout_ms = 0"),
        Err(BusError::Invalid { .. })
    ));
    for zero in ["header_read_timeout_ms", "max_http_connections"] {
        assert!(matches!(
            Config::from_toml(&format!("[bus]\n{zero} = 0")),
            Err(BusError::Invalid { .. })
        ));
    }
    assert!(matches!(
        Config::from_toml("[bus]\nmax_wait_ms = 300001"),
        Err(BusError::Invalid { .. })
    ));
    // The read path's bounds: room for one body at least, an answer within the room.
    for bad in [
        "[bus]\nmax_body_bytes_in_flight = 1048575",
        "[bus]\nmax_fetch_bytes = 1048575",
        "[bus]\nmax_fetch_bytes = 2097152\nmax_body_bytes_in_flight = 2097151",
    ] {
        let err = Config::from_toml(bad).expect_err(bad);
        assert!(matches!(err, BusError::Invalid { .. }), "{bad}: {err:?}");
    }
    let c =
        Config::from_toml("[bus]\nmax_fetch_bytes = 1048576\nmax_body_bytes_in_flight = 1048576")
            .unwrap();
    assert_eq!(
        (c.bus.max_fetch_bytes, c.bus.max_body_bytes_in_flight),
        (1 << 20, 1 << 20)
    );
    let err = Config::from_toml("[bus]\ntoken_cache_ms = 1001").expect_err("above 1 s");
    assert!(
        matches!(err, BusError::Invalid { .. }) && err.to_string().contains("bus.token_cache_ms"),
        "{err}"
    );
    for ok in [0, 1_000] {
        let c = Config::from_toml(&format!("[bus]\ntoken_cache_ms = {ok}")).unwrap();
        assert_eq!(c.bus.token_cache_ms, ok);
    }
    for bad in [
        "[bus]\nheader_read_timeout_ms = 18446744073709551615",
        "[bus]\nhealth_timeout_ms = 86400001",
        "[bus]\nrequest_timeout_ms = 0",
        "[bus]\nrequest_timeout_ms = 300001",
        "[bus]\nlease_max_ttl_ms = 999",
        "[bus]\nlease_max_ttl_ms = 86400001",
        "[bus]\nlease_default_ttl_ms = 3600001",
        "[bus]\nlease_default_ttl_ms = 0",
        "[bus]\nmax_http_connections = 1000001",
        "[database]\nurl = \"postgres://u:hunter2@127.0.0.1:notaport/db\"",
    ] {
        let err = Config::from_toml(bad).expect_err(bad);
        assert!(matches!(err, BusError::Invalid { .. }), "{bad}");
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
    assert!(matches!(
        Config::from_toml("[database]\nurl = \"postgres://h/db\"\nlisten_url = \"mysql://h/db\""),
        Err(BusError::Invalid { .. })
    ));
}

#[test]
fn the_http_allow_list_takes_the_older_mcp_lists_too() {
    let c = Config::from_toml(
        "[http]\nallowed_hosts = [\"bus.example.com\"]\n\
             [mcp]\nallowed_hosts = [\"bus.example.com\", \"old.example\"]\n\
             allowed_origins = [\"https://console.example.com\"]",
    )
    .unwrap();
    let allow = c.allow_list();
    assert_eq!(allow.allowed_hosts, ["bus.example.com", "old.example"]);
    assert_eq!(allow.allowed_origins, ["https://console.example.com"]);
    for bad in [
        "[http]\nallowed_hosts = [\"http://bus.example.com\"]",
        "[http]\nallowed_origins = [\"console.example.com\"]",
    ] {
        let err = Config::from_toml(bad).unwrap_err();
        assert!(
            matches!(err, BusError::Invalid { .. }) && err.to_string().contains("http."),
            "{bad}: {err}"
        );
    }
}

#[test]
fn the_console_section_is_checked() {
    let c = Config::default();
    assert!(c.console.enabled && !c.console.secure_cookies);
    assert_eq!(c.console.session_idle_s, 43_200);
    for bad in [
        "[console]\nsession_idle_s = 59",
        "[console]\nsession_idle_s = 2592001",
        "[console]\nunknown = true",
    ] {
        assert!(
            matches!(Config::from_toml(bad), Err(BusError::Invalid { .. })),
            "{bad}"
        );
    }
    let c = Config::from_toml("[console]\nenabled = false\nsecure_cookies = true").unwrap();
    assert!(!c.console.enabled && c.console.secure_cookies);
}

#[test]
fn mcp_lists_take_hosts_and_origins_and_refuse_anything_else() {
    let c = Config::from_toml(
            "[mcp]\nallowed_hosts = [\"bus.example.com\", \"bus.example.com:8443\", \"::1\"]\n\
             allowed_origins = [\"https://console.example.com:443\", \"http://devbox:*\", \"null\"]",
        )
        .unwrap();
    assert_eq!(c.mcp.allowed_hosts.len(), 3);
    assert_eq!(c.mcp.allowed_origins.len(), 3);
    assert!(Config::default().mcp.allowed_hosts.is_empty());
    for bad in [
        "[mcp]\nallowed_hosts = [\"\"]",
        "[mcp]\nallowed_hosts = [\"http://bus.example.com\"]",
        "[mcp]\nallowed_origins = [\"console.example.com\"]",
        "[mcp]\nallowed_origins = [\"https://console.example.com/app\"]",
        "[mcp]\nunknown = 1",
    ] {
        assert!(
            matches!(Config::from_toml(bad), Err(BusError::Invalid { .. })),
            "{bad}"
        );
    }
}

#[test]
fn a_bad_value_never_echoes_a_secret() {
    let err = Config::from_toml("[database]\nurl = 17\nmax_connections = \"hunter2\"")
        .err()
        .unwrap();
    assert!(!err.to_string().contains("hunter2"));
}

#[test]
fn a_syntax_error_never_echoes_the_offending_line() {
    for text in [
        "[database]\nurl = \"postgres://u:hunter2@h/db\n",
        "listen = hunter2\n",
        "[nats.runtime]\npassword = \"hunter2\" x\n",
    ] {
        let err = Config::from_toml(text).err().unwrap();
        assert!(matches!(err, BusError::Invalid { .. }));
        let shown = err.to_string();
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("line"), "the position is kept: {shown}");
    }
}

#[test]
fn debug_never_prints_passwords() {
    let c = Config::from_toml(
        "[database]\nurl = \"postgres://crew:hunter2@db:5432/crewbus?password=hunter3\"\n\
             listen_url = \"postgres://crew:hunter7@db:5432/crewbus\"\n\
             [nats]\nservers = [\"nats://u:hunter4@n:4222\"]\n\
             [nats.runtime]\nuser = \"rt\"\npassword = \"hunter5\"\n\
             [nats.provisioning]\ntoken = \"hunter6\"\n",
    )
    .unwrap();
    let text = format!("{c:?} {}", c.describe());
    for secret in [
        "hunter2", "hunter3", "hunter4", "hunter5", "hunter6", "hunter7",
    ] {
        assert!(!text.contains(secret), "{secret} leaked: {text}");
    }
    assert!(text.contains("crew:***@db:5432"));
}

#[test]
fn redaction_keeps_what_is_useful() {
    assert_eq!(redact_url("postgres://u:p@h/db"), "postgres://u:***@h/db");
    assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
    assert_eq!(redact_url("nats://h:4222"), "nats://h:4222");
    assert_eq!(
        redact_url("host=h password=s user=u"),
        "host=h password=*** user=u"
    );
}

#[test]
// figment's own Jail signature: its closure returns figment's (large) error.
#[allow(clippy::result_large_err)]
fn the_bridge_token_and_the_file_path_are_not_keys() {
    figment::Jail::expect_with(|jail| {
        jail.set_env("CREWBUS_MCP_TOKEN", "cbt_not_a_key");
        jail.set_env("CREWBUS_TOKEN", "cbt_not_a_key_either");
        jail.set_env("CREWBUS_CONFIG", "crewbus.toml");
        jail.create_file("crewbus.toml", "listen = \"127.0.0.1:7801\"")?;
        let c = Config::load(None).expect("the token variable is ignored");
        assert_eq!(c.listen.port(), 7801);
        // Any other CREWBUS_ variable is still a key, and an unknown one is refused.
        jail.set_env("CREWBUS_MCP_TOKNE", "x");
        assert!(matches!(Config::load(None), Err(BusError::Invalid { .. })));
        Ok(())
    });
}

#[test]
#[allow(clippy::result_large_err)]
fn variables_named_as_secret_sources_are_not_keys_and_others_are_named() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
                "crewbus.toml",
                "[push]\nkey_ring = { master_key_env = \"CREWBUS_MASTER_KEY\", dir = \"keys\" }\n\
                 [[push.destinations]]\nname = \"ops\"\nurl = \"https://hooks.example.com/x\"\n\
                 authentication = { scheme = \"Bearer\", credentials = { env = \"CREWBUS_OPS_TOKEN\" } }\n",
            )?;
        jail.set_env("CREWBUS_MASTER_KEY", "c2VjcmV0");
        jail.set_env("CREWBUS_OPS_TOKEN", "hunter2");
        let c = Config::load(None).expect("the named secret variables are not keys");
        assert_eq!(c.push.destinations.len(), 1);
        // A nested key from the environment is named as its variable.
        jail.set_env("CREWBUS_BUS__NOT_A_KEY", "1");
        let text = Config::load(None).err().unwrap().to_string();
        assert!(text.contains("CREWBUS_BUS__NOT_A_KEY"), "{text}");
        Ok(())
    });
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "crewbus.toml",
            "[push]\nkey_ring = { master_key_env = \"CREWBUS_MASTER_KEY\", dir = \"keys\" }\n",
        )?;
        jail.set_env("CREWBUS_MASTER_KEY", "c2VjcmV0");
        // A CREWBUS_ variable no `*_env` key of this file names is still a key.
        jail.set_env("CREWBUS_PUSH_MASTER_KEY", "also-a-secret");
        let err = Config::load(None).expect_err("an unknown variable is refused");
        let text = err.to_string();
        assert!(matches!(err, BusError::Invalid { .. }));
        assert!(text.contains("CREWBUS_PUSH_MASTER_KEY"), "{text}");
        assert!(!text.contains("also-a-secret"), "{text}");
        Ok(())
    });
}

/// Every TOML example in README.md and docs/operating.md loads as written (a secret's variables
/// set, as a user following it would).
#[test]
fn every_configuration_example_of_the_readme_loads() {
    let documents = [
        ("README.md", include_str!("../../../README.md")),
        (
            "docs/operating.md",
            include_str!("../../../docs/operating.md"),
        ),
    ];
    for (name, text) in documents {
        let mut blocks = 0;
        let mut rest = text;
        while let Some(start) = rest.find("```toml\n") {
            let body = &rest[start + 8..];
            let end = body.find("```").expect("a closed code block");
            let block = &body[..end];
            Config::from_toml(block)
                .unwrap_or_else(|e| panic!("{name} example does not load: {e}\n{block}"));
            blocks += 1;
            rest = &body[end..];
        }
        assert!(blocks >= 1, "{name} has configuration examples");
    }
}

#[test]
fn the_row_count_switch_is_off_unless_set() {
    assert!(!Config::default().storage.count_rows);
    let c = Config::from_toml("[storage]\ncount_rows = true").unwrap();
    assert!(c.storage.count_rows);
}
