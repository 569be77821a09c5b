//! toolward's own requests to a registry, each answer read with a bound: the bearer token,
//! manifests and blobs (a blob's redirect followed only to https, without `Authorization`).

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use oci_client::secrets::RegistryAuth;
use serde::Deserialize;

use super::{
    Descriptor, MAX_MANIFEST_BYTES, OCI_MANIFEST_MEDIA_TYPE, OciError, RegistryClient,
    sha256_digest,
};
use crate::config::OciReference;

/// Largest answer of a token endpoint read, in bytes: 64 KiB. A bearer token is a few KiB at
/// most; oci-client reads the answer whole, and a 1 GiB answer took 5 GB of memory.
pub const MAX_TOKEN_BYTES: u64 = 64 * 1024;
/// Most redirects a blob's download follows: 5. Registries redirect a blob once, to their
/// CDN.
pub const MAX_REDIRECTS: usize = 5;

/// What a request to a repository carries, found once per repository and operation.
#[derive(Clone)]
pub(super) enum Authorization {
    /// The registry's token endpoint gave this bearer token.
    Bearer(String),
    /// No token endpoint: no `Authorization`, then HTTP Basic with the credentials (if any)
    /// when the registry answers 401.
    BasicOnDemand,
}

/// The token endpoint's answer (the distribution token specification: `token`, or OAuth 2's
/// `access_token`).
#[derive(Deserialize)]
struct TokenAnswer {
    token: Option<String>,
    access_token: Option<String>,
}

/// The tokens a [`RegistryClient`] found, by repository and whether for a push.
#[derive(Default)]
pub(super) struct Tokens(Mutex<BTreeMap<(String, bool), Authorization>>);

/// Why a body was not read whole: more bytes than the limit (the count read, or announced),
/// or the connection failed.
pub(super) enum BodyError {
    TooLarge(u64),
    Failed(reqwest::Error),
}

/// The body of `response`, at most `limit` bytes: a `Content-Length` over it is refused before
/// the body, a longer body once it passes the limit.
pub(super) async fn read_bounded(
    mut response: reqwest::Response,
    limit: u64,
) -> Result<Vec<u8>, BodyError> {
    if let Some(length) = response.content_length()
        && length > limit
    {
        return Err(BodyError::TooLarge(length));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Failed)? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > limit {
            return Err(BodyError::TooLarge(bytes.len() as u64));
        }
    }
    Ok(bytes)
}

/// Whether `url` is plain http to a loopback address (not a name, which could resolve
/// elsewhere).
fn is_loopback_http(url: &reqwest::Url) -> bool {
    url.scheme() == "http"
        && url.host_str().is_some_and(|host| {
            host.trim_matches(|c| c == '[' || c == ']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
        })
}

impl RegistryClient {
    /// The registry's host and the repository `reference` names, as oci-client resolves them
    /// (Docker Hub's `docker.io` is `index.docker.io`, its `x` is `library/x`).
    fn location(reference: &OciReference) -> (String, String) {
        let target = super::to_client_reference(reference);
        (
            target.resolve_registry().to_owned(),
            target.repository().to_owned(),
        )
    }

    /// Whether the registry may send a request on to `url` (a token endpoint it names, a
    /// blob's redirect): https, or plain http to a loopback address for a loopback registry.
    pub(super) fn may_reach(&self, url: &reqwest::Url) -> bool {
        url.scheme() == "https" || (self.scheme == "http" && is_loopback_http(url))
    }

    /// What requests to `reference`'s repository carry, found once (per repository and
    /// operation) by asking `/v2/`: for a `Bearer` challenge, a token from the endpoint it
    /// names (its answer read no further than [`MAX_TOKEN_BYTES`], following no redirect,
    /// with the credentials only when [`Self::may_reach`] the endpoint). oci-client's own
    /// token request reads the answer whole.
    pub(super) async fn authorization(
        &self,
        reference: &OciReference,
        push: bool,
    ) -> Result<Authorization, OciError> {
        let (registry, repository) = Self::location(reference);
        let key = (repository.clone(), push);
        if let Some(found) = self
            .tokens
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
        {
            return Ok(found.clone());
        }
        let failed = |reason: String| OciError::Registry {
            reference: reference.to_string(),
            source: reason.into(),
        };
        let url = format!("{}://{registry}/v2/", self.scheme);
        let response =
            self.http.get(&url).send().await.map_err(|e| {
                failed(format!("`/v2/` could not be asked: {}", e.without_url()))
            })?;
        let challenge = response
            .headers()
            .get(http::header::WWW_AUTHENTICATE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        drop(response);
        let found = match super::bearer_challenge(&challenge) {
            None => Authorization::BasicOnDemand,
            Some((realm, service)) => {
                Authorization::Bearer(self.token(reference, &repository, push, &realm, service).await?)
            }
        };
        self.tokens
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, found.clone());
        Ok(found)
    }

    /// A bearer token from the endpoint `realm` for `reference`'s repository.
    async fn token(
        &self,
        reference: &OciReference,
        repository: &str,
        push: bool,
        realm: &str,
        service: Option<String>,
    ) -> Result<String, OciError> {
        let shown = crate::text::escape(realm);
        let failed = |reason: String| OciError::Registry {
            reference: reference.to_string(),
            source: format!("the token endpoint `{shown}`: {reason}").into(),
        };
        let credentials = match &self.auth {
            RegistryAuth::Basic(user, password) => Some((user, password)),
            _ => None,
        };
        let parsed = reqwest::Url::parse(realm);
        if let Some(_credentials) = credentials
            && !parsed.as_ref().is_ok_and(|url| self.may_reach(url))
        {
            return Err(OciError::Credentials {
                registry: self.registry.clone(),
                reason: format!(
                    "the registry names the token endpoint `{shown}`: credentials are sent over https only (plain http only to a loopback address, for a loopback registry), so they were not sent"
                ),
            });
        }
        let mut url = parsed.map_err(|_| failed("not a URL".to_owned()))?;
        let scope = format!(
            "repository:{repository}:{}",
            if push { "pull,push" } else { "pull" }
        );
        url.query_pairs_mut().append_pair("scope", &scope);
        if let Some(service) = service {
            url.query_pairs_mut().append_pair("service", &service);
        }
        let mut request = self.http.get(url);
        if let Some((user, password)) = credentials {
            request = request.basic_auth(user, Some(password));
        }
        let response = request
            .send()
            .await
            .map_err(|e| failed(format!("could not be asked: {}", e.without_url())))?;
        let status = response.status();
        if !status.is_success() {
            return Err(failed(format!("answered HTTP {status}")));
        }
        let bytes = match read_bounded(response, MAX_TOKEN_BYTES).await {
            Ok(bytes) => bytes,
            Err(BodyError::TooLarge(bytes)) => {
                return Err(OciError::TooLarge {
                    reference: reference.to_string(),
                    what: "the token endpoint's answer",
                    bytes,
                    limit: MAX_TOKEN_BYTES,
                });
            }
            Err(BodyError::Failed(e)) => {
                return Err(failed(format!("its answer: {}", e.without_url())));
            }
        };
        let answer: TokenAnswer = serde_json::from_slice(&bytes)
            .map_err(|e| failed(format!("its answer is not a token: {e}")))?;
        answer
            .token
            .or(answer.access_token)
            .filter(|token| !token.is_empty())
            .ok_or_else(|| failed("its answer holds no `token`".to_owned()))
    }

    /// `GET url` with what [`Self::authorization`] found for pulling `reference`, and HTTP
    /// Basic on a 401 when no token endpoint is named; no redirect followed.
    async fn get_authorized(
        &self,
        reference: &OciReference,
        url: &str,
        accept: Option<&'static str>,
    ) -> Result<reqwest::Response, OciError> {
        let authorization = self.authorization(reference, false).await?;
        let request = |basic: bool| {
            let mut request = self.http.get(url);
            if let Some(accept) = accept {
                request = request.header(http::header::ACCEPT, accept);
            }
            match (&authorization, &self.auth) {
                (Authorization::Bearer(token), _) => request.bearer_auth(token),
                (Authorization::BasicOnDemand, RegistryAuth::Basic(user, password)) if basic => {
                    request.basic_auth(user, Some(password))
                }
                _ => request,
            }
        };
        let send_error = |e: reqwest::Error| OciError::Registry {
            reference: reference.to_string(),
            source: Box::new(e.without_url()),
        };
        let response = request(false).send().await.map_err(send_error)?;
        if response.status() == reqwest::StatusCode::UNAUTHORIZED
            && matches!(authorization, Authorization::BasicOnDemand)
            && matches!(self.auth, RegistryAuth::Basic(..))
        {
            return request(true).send().await.map_err(send_error);
        }
        Ok(response)
    }

    /// The raw manifest at `reference` (its digest if pinned, else its tag) and its digest
    /// (SHA-256 of the bytes received, equal to the pin when there is one); `None` when the
    /// registry has none there. At most [`MAX_MANIFEST_BYTES`] are read: a longer
    /// `Content-Length` is refused before the body, a longer body when it passes the limit.
    pub(super) async fn manifest(
        &self,
        reference: &OciReference,
    ) -> Result<Option<(Vec<u8>, String)>, OciError> {
        let (registry, repository) = Self::location(reference);
        let url = format!(
            "{}://{registry}/v2/{repository}/manifests/{}",
            self.scheme,
            reference
                .digest
                .as_deref()
                .or(reference.tag.as_deref())
                .unwrap_or("latest")
        );
        let response = self
            .get_authorized(reference, &url, Some(OCI_MANIFEST_MEDIA_TYPE))
            .await?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(Self::failed(
                reference,
                format!("the manifest request answered HTTP {status}"),
            ));
        }
        let bytes = match read_bounded(response, MAX_MANIFEST_BYTES).await {
            Ok(bytes) => bytes,
            Err(BodyError::TooLarge(bytes)) => {
                return Err(OciError::TooLarge {
                    reference: reference.to_string(),
                    what: "the manifest",
                    bytes,
                    limit: MAX_MANIFEST_BYTES,
                });
            }
            Err(BodyError::Failed(e)) => {
                return Err(OciError::Registry {
                    reference: reference.to_string(),
                    source: Box::new(e.without_url()),
                });
            }
        };
        let actual = sha256_digest(&bytes);
        if let Some(expected) = &reference.digest
            && *expected != actual
        {
            return Err(OciError::DigestMismatch {
                reference: reference.to_string(),
                what: "the manifest",
                expected: expected.clone(),
                actual,
            });
        }
        Ok(Some((bytes, actual)))
    }

    /// The blob `descriptor` of `reference`'s repository, read no further than its size or
    /// `limit`, whichever is smaller, its digest checked. A redirect (registries send blobs
    /// from a CDN on another host) is followed at most [`MAX_REDIRECTS`] times, only where
    /// [`Self::may_reach`], and never with `Authorization`.
    pub(super) async fn blob(
        &self,
        reference: &OciReference,
        what: &'static str,
        descriptor: &Descriptor,
        limit: u64,
    ) -> Result<Vec<u8>, OciError> {
        let bound = limit.min(descriptor.size);
        let too_large = |bytes| OciError::TooLarge {
            reference: reference.to_string(),
            what,
            bytes,
            limit: bound,
        };
        if descriptor.size > limit {
            return Err(too_large(descriptor.size));
        }
        let send_error = |e: reqwest::Error| OciError::Registry {
            reference: reference.to_string(),
            source: Box::new(e.without_url()),
        };
        let (registry, repository) = Self::location(reference);
        let url = format!(
            "{}://{registry}/v2/{repository}/blobs/{}",
            self.scheme, descriptor.digest
        );
        let mut at = reqwest::Url::parse(&url)
            .map_err(|e| Self::failed(reference, format!("no blob URL: {e}")))?;
        let mut response = self.get_authorized(reference, &url, None).await?;
        let mut hops = 0;
        while response.status().is_redirection() {
            let location = response
                .headers()
                .get(http::header::LOCATION)
                .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned())
                .unwrap_or_default();
            let shown = crate::text::escape(&location);
            let next = at.join(&location).ok().filter(|next| self.may_reach(next));
            let Some(next) = next else {
                return Err(Self::failed(
                    reference,
                    format!(
                        "{what} `{}` is redirected to `{shown}`: a redirect is followed to https only (plain http only to a loopback address, for a loopback registry)",
                        descriptor.digest
                    ),
                ));
            };
            hops += 1;
            if hops > MAX_REDIRECTS {
                return Err(Self::failed(
                    reference,
                    format!(
                        "{what} `{}` is redirected more than {MAX_REDIRECTS} times (last to `{shown}`)",
                        descriptor.digest
                    ),
                ));
            }
            // Never `Authorization`: the registry's token is not the CDN's business.
            response = self
                .http
                .get(next.clone())
                .send()
                .await
                .map_err(send_error)?;
            at = next;
        }
        let status = response.status();
        if !status.is_success() {
            return Err(Self::failed(
                reference,
                format!(
                    "the request for {what} `{}` answered HTTP {status}",
                    descriptor.digest
                ),
            ));
        }
        let bytes = match read_bounded(response, bound).await {
            Ok(bytes) => bytes,
            Err(BodyError::TooLarge(bytes)) => return Err(too_large(bytes)),
            Err(BodyError::Failed(e)) => return Err(send_error(e)),
        };
        let actual = sha256_digest(&bytes);
        if actual != descriptor.digest {
            return Err(OciError::DigestMismatch {
                reference: reference.to_string(),
                what,
                expected: descriptor.digest.clone(),
                actual,
            });
        }
        Ok(bytes)
    }

    /// Hands oci-client (which pushes) what [`Self::authorization`] found for a push to
    /// `reference`: the bearer token, so oci-client asks no token endpoint itself.
    pub(super) async fn authorize_push(&self, reference: &OciReference) -> Result<(), OciError> {
        let auth = match self.authorization(reference, true).await? {
            Authorization::Bearer(token) => RegistryAuth::Bearer(token),
            Authorization::BasicOnDemand => self.auth.clone(),
        };
        let (registry, _) = Self::location(reference);
        self.client.store_auth_if_needed(&registry, &auth).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::io::Write as _;
    use std::sync::Arc;
    use std::sync::mpsc::{Receiver, channel};

    use p256::ecdsa::signature::Signer as _;
    use p256::ecdsa::{Signature, SigningKey};

    use super::super::tests::read_head;
    use super::super::*;
    use super::*;

    type Answer = dyn Fn(&str, &str) -> Vec<u8> + Send + Sync;

    /// A registry on loopback answering each request with what `answer` gives for its head and
    /// the registry's own address (a whole HTTP response); every head is sent on the
    /// receiver.
    fn fake_registry(
        answer: impl Fn(&str, &str) -> Vec<u8> + Send + Sync + 'static,
    ) -> (String, Receiver<String>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let (saw, seen) = channel();
        let answer: Arc<Answer> = Arc::new(answer);
        let own = address.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let (answer, saw, own) = (answer.clone(), saw.clone(), own.clone());
                std::thread::spawn(move || {
                    while let Some(head) = read_head(&mut stream) {
                        let head = String::from_utf8_lossy(&head).into_owned();
                        let _ = saw.send(head.clone());
                        if stream.write_all(&answer(&head, &own)).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (address, seen)
    }

    fn ok(body: &[u8]) -> Vec<u8> {
        let mut response = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len())
            .into_bytes();
        response.extend_from_slice(body);
        response
    }

    fn status(line: &str, headers: &str) -> Vec<u8> {
        format!("HTTP/1.1 {line}\r\n{headers}Content-Length: 0\r\n\r\n").into_bytes()
    }

    /// `/v2/` asks for a bearer token from `/token` of the same registry.
    fn challenge(own: &str) -> Vec<u8> {
        status(
            "401 Unauthorized",
            &format!("WWW-Authenticate: Bearer realm=\"http://{own}/token\",service=\"r\"\r\n"),
        )
    }

    fn block_on<T>(future: impl std::future::Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    }

    fn descriptor(media_type: &str, bytes: &[u8]) -> Descriptor {
        serde_json::from_value(serde_json::json!({
            "mediaType": media_type,
            "digest": sha256_digest(bytes),
            "size": bytes.len(),
        }))
        .unwrap()
    }

    fn blob_of(registry: &str, bytes: &[u8]) -> Result<Vec<u8>, OciError> {
        let reference = OciReference::parse(&format!("{registry}/p/c:v1")).unwrap();
        block_on(async {
            let client = RegistryClient::new(&reference.registry).unwrap();
            client
                .blob(&reference, "the layer", &descriptor("x", bytes), 1024 * 1024)
                .await
        })
    }

    #[test]
    fn a_token_endpoints_answer_is_read_no_further_than_the_limit() {
        // 16 MiB of token, chunked: oci-client read such an answer whole.
        let (registry, _) = fake_registry(|head, own| {
            if head.starts_with("GET /v2/ ") {
                return challenge(own);
            }
            let mut response =
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
                    .to_vec();
            let chunk = vec![b'a'; 4096];
            for _ in 0..4096 {
                response.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                response.extend_from_slice(&chunk);
                response.extend_from_slice(b"\r\n");
            }
            response.extend_from_slice(b"0\r\n\r\n");
            response
        });
        let refused = super::super::tests::pull_manifest(&format!("{registry}/p/c:v1"));
        let Err(OciError::TooLarge { what, bytes, limit, .. }) = refused else {
            panic!("{refused:?}");
        };
        assert_eq!(what, "the token endpoint's answer");
        assert_eq!(limit, MAX_TOKEN_BYTES);
        assert!(bytes < MAX_TOKEN_BYTES + 512 * 1024, "{bytes}");
    }

    #[test]
    fn the_token_is_asked_for_the_repository_and_sent_with_the_manifest_request() {
        let manifest = br#"{"schemaVersion":2}"#;
        let (registry, seen) = fake_registry(move |head, own| {
            if head.starts_with("GET /v2/ ") {
                challenge(own)
            } else if head.starts_with("GET /token?") {
                ok(br#"{"token":"t0k"}"#)
            } else if head.contains("authorization: Bearer t0k") {
                ok(manifest)
            } else {
                status("401 Unauthorized", "")
            }
        });
        let pulled = super::super::tests::pull_manifest(&format!("{registry}/p/c:v1"));
        assert_eq!(pulled.unwrap().unwrap().0, manifest);
        let heads: Vec<String> = seen.try_iter().collect();
        assert!(
            heads
                .iter()
                .any(|head| head.starts_with("GET /token?scope=repository%3Ap%2Fc%3Apull&service=r ")),
            "{heads:#?}"
        );
    }

    #[test]
    fn a_blob_redirected_to_plain_http_elsewhere_is_refused_naming_the_reference_and_the_location()
    {
        let (registry, seen) = fake_registry(|head, _| {
            if head.starts_with("GET /v2/ ") {
                ok(b"{}")
            } else {
                status("302 Found", "Location: http://192.0.2.7/blob\r\n")
            }
        });
        let started = std::time::Instant::now();
        let refused = blob_of(&registry, b"layer");
        let Err(error @ OciError::Registry { .. }) = refused else {
            panic!("{refused:?}");
        };
        let message = error.to_string();
        assert!(message.contains(&format!("`oci://{registry}/p/c:v1`")), "{message}");
        assert!(message.contains("redirected to `http://192.0.2.7/blob"), "{message}");
        // Refused from the answer alone: 192.0.2.7 is never tried.
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        assert_eq!(seen.try_iter().count(), 2);
    }

    #[test]
    fn a_blob_redirected_to_another_server_is_read_there_without_authorization() {
        let layer = b"the layer's bytes".to_vec();
        let served = layer.clone();
        let (cdn, cdn_seen) = fake_registry(move |_, _| ok(&served));
        let (registry, _) = fake_registry(move |head, own| {
            if head.starts_with("GET /v2/ ") {
                challenge(own)
            } else if head.starts_with("GET /token?") {
                ok(br#"{"token":"t0k"}"#)
            } else {
                status("307 Temporary Redirect", &format!("Location: http://{cdn}/cdn/blob\r\n"))
            }
        });
        assert_eq!(blob_of(&registry, &layer).unwrap(), layer);
        let heads: Vec<String> = cdn_seen.try_iter().collect();
        assert_eq!(heads.len(), 1, "{heads:#?}");
        assert!(heads[0].starts_with("GET /cdn/blob "), "{heads:#?}");
        assert!(!heads[0].to_ascii_lowercase().contains("authorization"), "{heads:#?}");
    }

    #[test]
    fn a_blob_redirected_without_end_is_refused_after_the_limit() {
        let (registry, seen) = fake_registry(|head, _| {
            if head.starts_with("GET /v2/ ") {
                ok(b"{}")
            } else {
                status("302 Found", "Location: /again\r\n")
            }
        });
        let refused = blob_of(&registry, b"layer");
        let message = refused.unwrap_err().to_string();
        assert!(
            message.contains(&format!("redirected more than {MAX_REDIRECTS} times")),
            "{message}"
        );
        assert_eq!(seen.try_iter().count(), 2 + MAX_REDIRECTS);
    }

    #[test]
    fn a_blob_is_read_no_further_than_the_size_its_descriptor_names() {
        let (registry, _) = fake_registry(|head, _| {
            if head.starts_with("GET /v2/ ") {
                ok(b"{}")
            } else {
                let mut response =
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
                for _ in 0..64 {
                    response.extend_from_slice(b"1000\r\n");
                    response.extend_from_slice(&[b'x'; 4096]);
                    response.extend_from_slice(b"\r\n");
                }
                response.extend_from_slice(b"0\r\n\r\n");
                response
            }
        });
        let refused = blob_of(&registry, b"five!");
        let Err(OciError::TooLarge { limit, bytes, .. }) = refused else {
            panic!("{refused:?}");
        };
        assert_eq!(limit, 5);
        assert!(bytes < 256 * 1024, "{bytes}");
    }

    /// A settings artifact pinned by digest, its signature manifest holding `junk` signatures
    /// that are not base64 and then one by `key`: the registry serving them, and the pinned
    /// reference.
    fn signed_behind_junk(junk: usize, key: &SigningKey) -> (String, String) {
        let mut blobs: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        let mut put = |bytes: Vec<u8>| {
            let digest = sha256_digest(&bytes);
            blobs.insert(digest.clone(), bytes);
            digest
        };
        let settings = b"{\"deny\": []}".to_vec();
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "artifactType": SETTINGS_MEDIA_TYPE,
            "config": {"mediaType": EMPTY_CONFIG_MEDIA_TYPE, "digest": put(EMPTY_CONFIG.to_vec()), "size": 2},
            "layers": [{"mediaType": SETTINGS_MEDIA_TYPE, "digest": put(settings.clone()), "size": settings.len()}],
        })
        .to_string()
        .into_bytes();
        let digest = put(manifest.clone());
        let registry_placeholder = OciReference::parse("127.0.0.1:1/p/s").unwrap();
        let mut layers = Vec::new();
        for n in 0..junk {
            let payload = format!("junk {n}").into_bytes();
            layers.push(serde_json::json!({
                "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
                "digest": put(payload.clone()),
                "size": payload.len(),
                "annotations": {SIGNATURE_ANNOTATION: "not base64!"},
            }));
        }
        let payload = signature_payload(&registry_placeholder, &digest);
        let signature: Signature = key.sign(payload.as_bytes());
        layers.push(serde_json::json!({
            "mediaType": SIMPLE_SIGNING_MEDIA_TYPE,
            "digest": put(payload.clone().into_bytes()),
            "size": payload.len(),
            "annotations": {SIGNATURE_ANNOTATION: BASE64.encode(signature.to_der().as_bytes())},
        }));
        let signatures = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": OCI_CONFIG_MEDIA_TYPE, "digest": put(b"{}".to_vec()), "size": 2},
            "layers": layers,
        })
        .to_string()
        .into_bytes();
        let tag = signature_tag(&digest);
        let (registry, _) = fake_registry(move |head, _| {
            let path = head.split(' ').nth(1).unwrap_or_default();
            if path == "/v2/" {
                return ok(b"{}");
            }
            if path.ends_with(&format!("/manifests/{tag}")) {
                return ok(&signatures);
            }
            let name = path.rsplit('/').next().unwrap_or_default();
            match blobs.get(name) {
                Some(bytes) => ok(bytes),
                None => status("404 Not Found", ""),
            }
        });
        (registry.clone(), format!("{registry}/p/s@{digest}"))
    }

    #[test]
    fn a_valid_signature_behind_more_junk_ones_than_the_old_limit_verifies() {
        let key = SigningKey::from_slice(&[7u8; 32]).unwrap();
        let keys = TrustedKeys {
            keys: vec![("release".to_owned(), *key.verifying_key())],
        };
        let (_, pinned) = signed_behind_junk(MAX_SIGNATURES + 8, &key);
        let reference = OciReference::parse(&pinned).unwrap();
        let verified = block_on(async {
            let client = RegistryClient::new(&reference.registry).unwrap();
            client
                .pull_within_deadline(&reference, ArtifactKind::PolicySettings, &keys)
                .await
        })
        .unwrap()
        .verify(&reference, &keys, None)
        .unwrap();
        assert_eq!(verified.signer, "release");
        assert_eq!(verified.bytes, b"{\"deny\": []}");
        // With another key, each signature is refused, the list of reasons bounded.
        let other = SigningKey::from_slice(&[9u8; 32]).unwrap();
        let others = TrustedKeys {
            keys: vec![("other".to_owned(), *other.verifying_key())],
        };
        let refused = block_on(async {
            let client = RegistryClient::new(&reference.registry).unwrap();
            client
                .pull_within_deadline(&reference, ArtifactKind::PolicySettings, &others)
                .await
        })
        .unwrap()
        .verify(&reference, &others, None);
        let Err(OciError::BadSignature { reason, .. }) = refused else {
            panic!("{refused:?}");
        };
        assert!(reason.contains("signature 1 is not base64"), "{reason}");
        assert!(
            reason.contains(&format!("and {} more signatures not accepted", MAX_SIGNATURES + 9 - MAX_REASONS_SHOWN)),
            "{reason}"
        );
    }
}
