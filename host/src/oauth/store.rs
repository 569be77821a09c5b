//! Grants kept in the state folder, encrypted at rest: `oauth/SERVER.grant` (mode `0600`)
//! holds [`MAGIC`], a random 24-byte nonce and the XChaCha20-Poly1305 encryption of the
//! grant's JSON, with the server's name as associated data. The key is derived (HMAC-SHA256
//! with a label of its own) from the random key file [`KEY_FILE`] of the state folder (mode
//! `0600`, created at first use). The state folder is withheld from every confined server
//! (`crate::confine::default_denied`), so are both files.

use std::path::{Path, PathBuf};
use std::time::Duration;

use cap_std::fs::Dir;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use reqwest::header::HeaderValue;
use serde::{Deserialize, Serialize};

use super::{OAuthError, now_secs};
use crate::state_dir::StateDir;

/// The key file of the grants, in the state folder.
pub const KEY_FILE: &str = "oauth.key";

/// The folder of the grant files, in the state folder.
pub const GRANTS_DIR: &str = "oauth";

/// What a grant file's name ends with.
pub const GRANT_SUFFIX: &str = ".grant";

/// The first bytes of every grant file: its format.
pub const MAGIC: &[u8] = b"toolward-oauth-grant-1\n";

/// Largest grant file read, in bytes: 64 KiB (a grant is a few hundred bytes of tokens and
/// URLs).
pub const MAX_GRANT_FILE_BYTES: u64 = 64 * 1024;

/// The label the encryption key is derived from the key file with.
const KEY_LABEL: &[u8] = b"toolward oauth grant encryption v1";

/// Bytes of an XChaCha20-Poly1305 nonce.
const NONCE_BYTES: usize = 24;

/// How a grant was obtained, so it is renewed the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrantKind {
    /// A person signed in through a browser; renewed with the refresh token, if any.
    AuthorizationCode,
    /// toolward signed in as itself; renewed by asking again.
    ClientCredentials,
}

/// How the client authenticates at the token endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ClientAuth {
    /// A public client: its id in the body, no secret.
    None,
    /// `client_secret_basic`: HTTP Basic.
    SecretBasic,
    /// `client_secret_post`: id and secret in the body.
    SecretPost,
}

/// One server's grant: the tokens and what it takes to renew and revoke them. Its debug
/// output leaves out every secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The server's name.
    pub server: String,
    /// The server's URL the grant was issued for (the `resource`, RFC 8707): tokens go to it
    /// alone.
    pub resource: String,
    /// The authorization server's `issuer`.
    pub issuer: String,
    /// Its token endpoint.
    pub token_endpoint: String,
    /// Its revocation endpoint (RFC 7009), when it advertises one.
    pub revocation_endpoint: Option<String>,
    /// The client id toolward signed in as.
    pub client_id: String,
    /// Its secret, when it has one.
    pub client_secret: Option<String>,
    /// How the client authenticates at the token endpoint.
    pub client_auth: ClientAuth,
    /// How the grant was obtained.
    pub kind: GrantKind,
    /// The access token.
    pub access_token: String,
    /// The refresh token, when the authorization server gave one.
    pub refresh_token: Option<String>,
    /// When the access token expires, in seconds since the Unix epoch; `None`: not said.
    pub expires_at: Option<u64>,
    /// The scopes granted (those asked for when the answer does not say).
    pub scopes: Vec<String>,
    /// When the grant was obtained or last renewed, in seconds since the Unix epoch.
    pub obtained_at: u64,
}

impl std::fmt::Debug for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Grant")
            .field("server", &self.server)
            .field("resource", &self.resource)
            .field("issuer", &self.issuer)
            .field("client_id", &self.client_id)
            .field("kind", &self.kind)
            .field("refresh_token", &self.refresh_token.as_ref().map(|_| ".."))
            .field("expires_at", &self.expires_at)
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
    }
}

impl Grant {
    /// Whether the access token expires within `margin` from now (or has).
    pub fn expires_within(&self, margin: Duration) -> bool {
        self.expires_at
            .is_some_and(|at| now_secs().saturating_add(margin.as_secs()) >= at)
    }

    /// `Bearer TOKEN`, marked sensitive.
    ///
    /// # Errors
    /// [`OAuthError::NotSignedIn`] when the token holds a character a header cannot.
    pub fn authorization(&self, server: &str) -> Result<HeaderValue, OAuthError> {
        let mut value =
            HeaderValue::from_str(&format!("Bearer {}", self.access_token)).map_err(|_| {
                OAuthError::NotSignedIn {
                    server: server.to_owned(),
                    reason: String::from("its access token holds a character a header cannot"),
                }
            })?;
        value.set_sensitive(true);
        Ok(value)
    }
}

/// The grants of a state folder: read, written and removed one server at a time.
pub struct GrantStore {
    dir: Dir,
    path: PathBuf,
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for GrantStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrantStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl GrantStore {
    /// The grants of `state`: its [`GRANTS_DIR`] folder (created `0700`) and its key file
    /// [`KEY_FILE`] (created `0600` from the system's random source at first use).
    ///
    /// # Errors
    /// [`OAuthError::Store`].
    pub fn open(state: &StateDir) -> Result<GrantStore, OAuthError> {
        let store_error = |error: crate::state_dir::StateError| OAuthError::Store {
            server: String::from("*"),
            reason: error.to_string(),
        };
        let key = state.key(KEY_FILE).map_err(store_error)?;
        let derived = hex::decode(key.mac_hex(&[KEY_LABEL])).map_err(|_| OAuthError::Store {
            server: String::from("*"),
            reason: String::from("the key could not be derived"),
        })?;
        let cipher =
            XChaCha20Poly1305::new_from_slice(&derived).map_err(|_| OAuthError::Store {
                server: String::from("*"),
                reason: String::from("the derived key has the wrong length"),
            })?;
        let dir = state.subdir(GRANTS_DIR).map_err(store_error)?;
        Ok(GrantStore {
            dir,
            path: state.path().join(GRANTS_DIR),
            cipher,
        })
    }

    /// The file of `server`'s grant, for messages.
    pub fn file(&self, server: &str) -> PathBuf {
        self.path.join(file_name(server))
    }

    /// `server`'s grant, `None` when it has none.
    ///
    /// # Errors
    /// [`OAuthError::Tampered`] when the file does not decrypt under the key with this
    /// server's name; [`OAuthError::Store`] when it cannot be read (a wrong owner or mode, a
    /// symlink, larger than [`MAX_GRANT_FILE_BYTES`]).
    pub fn read(&self, server: &str) -> Result<Option<Grant>, OAuthError> {
        let name = file_name(server);
        let full = self.file(server);
        let file = match crate::state_dir::open_private_in(&self.dir, Path::new(&name), &full) {
            Ok(file) => file,
            Err(error) if error.not_found() => return Ok(None),
            Err(error) => {
                return Err(OAuthError::Store {
                    server: server.to_owned(),
                    reason: error.to_string(),
                });
            }
        };
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(file, MAX_GRANT_FILE_BYTES + 1),
            &mut bytes,
        )
        .map_err(|error| OAuthError::Store {
            server: server.to_owned(),
            reason: format!("`{}`: {error}", full.display()),
        })?;
        if bytes.len() as u64 > MAX_GRANT_FILE_BYTES {
            return Err(OAuthError::Store {
                server: server.to_owned(),
                reason: format!(
                    "`{}` is larger than the limit of {MAX_GRANT_FILE_BYTES} bytes",
                    full.display()
                ),
            });
        }
        self.decrypt(server, &bytes, &full).map(Some)
    }

    /// The grant in `bytes` (a grant file's content) of `server`.
    fn decrypt(&self, server: &str, bytes: &[u8], full: &Path) -> Result<Grant, OAuthError> {
        let tampered = || OAuthError::Tampered {
            server: server.to_owned(),
            path: full.display().to_string(),
        };
        let rest = bytes.strip_prefix(MAGIC).ok_or_else(tampered)?;
        if rest.len() < NONCE_BYTES {
            return Err(tampered());
        }
        let (nonce, sealed) = rest.split_at(NONCE_BYTES);
        let plain = self
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: server.as_bytes(),
                },
            )
            .map_err(|_| tampered())?;
        let grant: Grant = serde_json::from_slice(&plain).map_err(|_| tampered())?;
        if grant.server != server {
            return Err(tampered());
        }
        Ok(grant)
    }

    /// The bytes of a grant file holding `grant`.
    ///
    /// # Errors
    /// [`OAuthError::Store`] when no nonce can be drawn.
    pub fn seal(&self, grant: &Grant) -> Result<Vec<u8>, OAuthError> {
        let failed = |reason: String| OAuthError::Store {
            server: grant.server.clone(),
            reason,
        };
        let mut nonce = [0u8; NONCE_BYTES];
        getrandom::fill(&mut nonce).map_err(|error| failed(format!("no randomness: {error}")))?;
        let plain = serde_json::to_vec(grant).map_err(|error| failed(error.to_string()))?;
        let sealed = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &plain,
                    aad: grant.server.as_bytes(),
                },
            )
            .map_err(|_| failed(String::from("the grant could not be encrypted")))?;
        let mut bytes = Vec::with_capacity(MAGIC.len() + NONCE_BYTES + sealed.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        Ok(bytes)
    }

    /// Writes `grant` as its server's grant, replacing the one before.
    ///
    /// # Errors
    /// [`OAuthError::Store`].
    pub fn write(&self, grant: &Grant) -> Result<(), OAuthError> {
        let bytes = self.seal(grant)?;
        let name = file_name(&grant.server);
        crate::state_dir::replace_private_in(&self.dir, &name, &bytes, &self.file(&grant.server))
            .map_err(|error| OAuthError::Store {
                server: grant.server.clone(),
                reason: error.to_string(),
            })
    }

    /// Removes `server`'s grant; whether there was one.
    ///
    /// # Errors
    /// [`OAuthError::Store`].
    pub fn remove(&self, server: &str) -> Result<bool, OAuthError> {
        match self.dir.remove_file(file_name(server)) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(OAuthError::Store {
                server: server.to_owned(),
                reason: format!("`{}`: {error}", self.file(server).display()),
            }),
        }
    }

    /// The names of the servers with a grant file, sorted.
    ///
    /// # Errors
    /// [`OAuthError::Store`].
    pub fn servers(&self) -> Result<Vec<String>, OAuthError> {
        let entries = self.dir.entries().map_err(|error| OAuthError::Store {
            server: String::from("*"),
            reason: format!("`{}`: {error}", self.path.display()),
        })?;
        let mut servers: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|entry| {
                let name = entry.file_name().into_string().ok()?;
                let server = name.strip_suffix(GRANT_SUFFIX)?;
                (!server.is_empty() && !server.starts_with('.')).then(|| server.to_owned())
            })
            .collect();
        servers.sort();
        Ok(servers)
    }
}

fn file_name(server: &str) -> String {
    format!("{server}{GRANT_SUFFIX}")
}
