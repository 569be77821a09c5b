//! The MCP lifecycle: the `server/discover` probe or the `initialize` handshake, and the
//! server's identity from its answer.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::client::{Payload, RequestOptions, Shared};
use super::{
    CLIENT_NAME, CLIENT_VERSION, DISCOVER_PROBE_TIMEOUT, DISCOVER_PROTOCOL_VERSION,
    PROTOCOL_VERSION, SUPPORTED_PROTOCOL_VERSIONS, ServerIdentity, TransportError,
};

/// `_meta` keys of the 2026-07-28 revision.
pub(super) const META_PROTOCOL_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub(super) const META_CLIENT_INFO: &str = "io.modelcontextprotocol/clientInfo";
pub(super) const META_CLIENT_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";

/// The JSON-RPC error code of an unsupported protocol version (2026-07-28).
const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// The server's identity from a `server/discover` or `initialize` result: `info` is its
/// `serverInfo` object (name and version), `version` the protocol version agreed.
fn identity(result: &Map<String, Value>, info: Option<&Value>, version: &str) -> ServerIdentity {
    let text = |field: &str| {
        info.and_then(|info| info.get(field))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    ServerIdentity {
        name: text("name"),
        version: text("version"),
        protocol_version: version.to_owned(),
        capabilities: result
            .get("capabilities")
            .cloned()
            .unwrap_or_else(|| json!({})),
        instructions: result
            .get("instructions")
            .and_then(Value::as_str)
            .map(str::to_owned),
    }
}

/// `params` with the members of `meta` added to its `_meta` (a member already there wins).
pub(super) fn with_request_meta(mut params: Value, meta: Option<&Map<String, Value>>) -> Value {
    let (Some(meta), Value::Object(object)) = (meta, &mut params) else {
        return params;
    };
    let target = object
        .entry(String::from("_meta"))
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(target) = target {
        for (key, value) in meta {
            target.entry(key.clone()).or_insert_with(|| value.clone());
        }
    }
    params
}

/// The lifecycle: `server/discover` for a server of the 2026-07-28 revision, else the
/// `initialize` handshake. The probe comes first, as the SDKs' clients do it: a server of an
/// earlier revision answers it with an error (method not found), and `initialize` follows.
pub(super) async fn lifecycle(shared: &Arc<Shared>) -> Result<ServerIdentity, TransportError> {
    if let Some(identity) = discover(shared, Some(DISCOVER_PROBE_TIMEOUT)).await? {
        return Ok(identity);
    }
    match initialize(shared).await {
        // The probe timed out, but the server has since settled on the 2026-07-28 revision.
        Err(TransportError::Rpc {
            code: UNSUPPORTED_PROTOCOL_VERSION,
            data,
            ..
        }) if supported_versions(data.as_ref())
            .iter()
            .any(|version| version == DISCOVER_PROTOCOL_VERSION) =>
        {
            match discover(shared, None).await? {
                Some(identity) => Ok(identity),
                None => Err(TransportError::MalformedResponse {
                    server: shared.server.clone(),
                    method: String::from("server/discover"),
                    detail: format!(
                        "the server refused `initialize` for {DISCOVER_PROTOCOL_VERSION}, then did not discover with it"
                    ),
                }),
            }
        }
        other => other,
    }
}

/// `data.supported` of an unsupported-protocol-version error: the versions the server speaks.
fn supported_versions(data: Option<&Value>) -> Vec<String> {
    data.and_then(|data| data.get("supported"))
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The `server/discover` probe (MCP 2026-07-28, "Lifecycle"): the server's identity when it
/// speaks [`DISCOVER_PROTOCOL_VERSION`], with every later request carrying the client's
/// context in `_meta`; `None` when it does not (an error answer, no answer within
/// `timeout`, or a result that offers only earlier versions).
///
/// # Errors
/// [`TransportError::UnsupportedProtocol`] when the server answers that it speaks only
/// versions toolward does not; [`TransportError::Failed`] when it fails meanwhile.
async fn discover(
    shared: &Arc<Shared>,
    timeout: Option<Duration>,
) -> Result<Option<ServerIdentity>, TransportError> {
    let meta = Map::from_iter([
        (
            String::from(META_PROTOCOL_VERSION),
            json!(DISCOVER_PROTOCOL_VERSION),
        ),
        (
            String::from(META_CLIENT_INFO),
            json!({ "name": CLIENT_NAME, "version": CLIENT_VERSION }),
        ),
        // No capabilities, as for `initialize` (see there).
        (String::from(META_CLIENT_CAPABILITIES), json!({})),
    ]);
    let params = json!({ "_meta": Value::Object(meta.clone()) });
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    let options = RequestOptions {
        raw: false,
        progress: None,
        timeout,
        cancellable: false,
    };
    let result = match shared.request(id, "server/discover", params, options).await {
        Ok(Payload::Decoded(Value::Object(result))) => result,
        // An HTTP server of an earlier revision may refuse the probe at the HTTP layer.
        Ok(_)
        | Err(TransportError::RequestTimeout { .. })
        | Err(TransportError::HttpStatus {
            status: 400..=499, ..
        }) => return Ok(None),
        Err(TransportError::Rpc { code, data, .. }) => {
            // Only a server that names the versions it speaks, none of them toolward's,
            // is refused; any other error is an earlier revision's "method not found".
            let supported = supported_versions(data.as_ref());
            let speaks_ours = supported.iter().any(|version| {
                version == DISCOVER_PROTOCOL_VERSION
                    || SUPPORTED_PROTOCOL_VERSIONS.contains(&version.as_str())
            });
            if code == UNSUPPORTED_PROTOCOL_VERSION && !supported.is_empty() && !speaks_ours {
                return Err(TransportError::UnsupportedProtocol {
                    server: shared.server.clone(),
                    version: supported.join(", "),
                });
            }
            return Ok(None);
        }
        Err(other) => return Err(other),
    };
    let speaks_it = result
        .get("supportedVersions")
        .and_then(Value::as_array)
        .is_some_and(|list| list.iter().any(|v| v == DISCOVER_PROTOCOL_VERSION));
    if !speaks_it {
        return Ok(None);
    }
    let info = result
        .get("_meta")
        .and_then(|meta| meta.get(META_SERVER_INFO))
        .or_else(|| result.get("serverInfo"));
    let _ = shared.request_meta.set(meta);
    Ok(Some(identity(&result, info, DISCOVER_PROTOCOL_VERSION)))
}

/// The `initialize` request (MCP specification, "Lifecycle", initialization); the caller
/// sends `notifications/initialized` after it.
async fn initialize(shared: &Arc<Shared>) -> Result<ServerIdentity, TransportError> {
    let params = json!({
        "protocolVersion": PROTOCOL_VERSION,
        // No roots, sampling or elicitation: servers change their tools by what the client
        // declares, and a filesystem server would trade its sandbox for the client's roots.
        "capabilities": {},
        "clientInfo": { "name": CLIENT_NAME, "version": CLIENT_VERSION },
    });
    let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
    // The start timeout bounds the whole handshake; `initialize` must not be cancelled.
    let options = RequestOptions {
        raw: false,
        progress: None,
        timeout: None,
        cancellable: false,
    };
    let malformed = |detail: &str| TransportError::MalformedResponse {
        server: shared.server.clone(),
        method: String::from("initialize"),
        detail: detail.to_owned(),
    };
    let Payload::Decoded(Value::Object(result)) =
        shared.request(id, "initialize", params, options).await?
    else {
        return Err(malformed("`result` is not an object"));
    };
    let Some(Value::String(version)) = result.get("protocolVersion") else {
        return Err(malformed("`protocolVersion` is missing or not a string"));
    };
    if !SUPPORTED_PROTOCOL_VERSIONS.contains(&version.as_str()) {
        return Err(TransportError::UnsupportedProtocol {
            server: shared.server.clone(),
            version: version.clone(),
        });
    }
    Ok(identity(&result, result.get("serverInfo"), version))
}
