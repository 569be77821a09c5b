//! A streamable HTTP server through the whole path: pinned with `toolward pin`'s function,
//! loaded by `Toolward::start`, one tool called through validation, policy, forward and
//! audit. The server is a small fixture on 127.0.0.1 answering in JSON.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use toolward::Toolward;
use toolward::approval::DenyAll;
use toolward::call::CallOutcome;
use toolward::config::Config;

/// The fixture's one page of tools, with a number past `u64` that pinning must keep.
const LISTING: &str = r#"{"tools": [{"name": "echo", "description": "Echoes.", "inputSchema": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 18446744073709551617}}, "required": ["text"]}}]}"#;

/// A minimal MCP server over streamable HTTP: JSON answers, one session id, an `echo` tool.
/// Returns its URL and the `Authorization` header of every request it received.
pub(crate) async fn serve() -> (String, Arc<Mutex<Vec<Option<String>>>>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let record = Arc::clone(&record);
            let service = service_fn(move |request: hyper::Request<Incoming>| {
                let record = Arc::clone(&record);
                async move {
                    let authorization = request
                        .headers()
                        .get("authorization")
                        .map(|value| value.to_str().unwrap().to_owned());
                    record.lock().unwrap().push(authorization);
                    let is_post = request.method() == hyper::Method::POST;
                    let body = request.into_body().collect().await.unwrap().to_bytes();
                    let message: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    Ok::<_, Infallible>(answer(is_post, &message))
                }
            });
            tokio::spawn(async move {
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (url, seen)
}

fn answer(is_post: bool, message: &Value) -> hyper::Response<Full<Bytes>> {
    let response = hyper::Response::builder();
    let (Some(id), true) = (message.get("id"), is_post) else {
        // Notifications, and the `GET` stream and `DELETE` this server does not offer.
        let status = if is_post { 202 } else { 405 };
        return response.status(status).body(Full::default()).unwrap();
    };
    let result = match message["method"].as_str().unwrap_or_default() {
        "initialize" => json!({
            "protocolVersion": message["params"]["protocolVersion"],
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "web-fixture", "version": "1.0.0"},
        })
        .to_string(),
        "tools/list" => LISTING.to_owned(),
        "tools/call" => {
            let text = message["params"]["arguments"]["text"].clone();
            json!({"content": [{"type": "text", "text": text}], "isError": false}).to_string()
        }
        _ => "{}".to_owned(),
    };
    response
        .status(200)
        .header("content-type", "application/json")
        .header("mcp-session-id", "integration-session")
        .body(Full::from(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#
        )))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_is_pinned_loaded_and_called_through_the_call_path() {
    let (url, seen) = serve().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rules.json"),
        json!({"servers": {"web": {"tools": {"echo": {"effect": "read-only"}}}}}).to_string(),
    )
    .unwrap();
    let config = Config::from_value(
        json!({
            "mcpServers": {
                "web": {"type": "http", "url": url, "headers": {"Authorization": "Bearer web-token"}}
            },
            "rules": {"file": "rules.json"},
            "manifest": "manifest.json",
            "state_dir": "state",
            "audit": {"file": "state/audit.jsonl", "sync": "none"},
        }),
        dir.path(),
    )
    .unwrap();
    let pinned = toolward::pin::pin(&config, None, None, BTreeMap::new())
        .await
        .unwrap();
    assert!(pinned.failures.is_empty(), "{:?}", pinned.failures);
    let server = &pinned.manifest.servers["web"];
    assert_eq!(server.server_name, "web-fixture");
    assert!(server.tools.contains_key("echo"));
    pinned.manifest.write(&config.manifest).unwrap();

    let toolward = Toolward::start(config).await.unwrap();
    let report = toolward.report().render();
    assert!(!toolward.report().refused_anything(), "{report}");
    let result = toolward
        .call(
            "web__echo",
            json!({"text": "over http"}).as_object().cloned(),
            Arc::new(DenyAll),
        )
        .await;
    assert!(!result.is_error(), "{}", result.result);
    assert_eq!(result.outcome, CallOutcome::Allowed);
    assert_eq!(result.text(), "over http");
    toolward.shutdown().await;

    let seen = seen.lock().unwrap();
    assert!(seen.len() >= 6, "{seen:?}");
    assert!(
        seen.iter()
            .all(|authorization| authorization.as_deref() == Some("Bearer web-token"))
    );
}
