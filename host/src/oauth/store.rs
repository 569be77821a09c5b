//! Grants kept encrypted at rest: one per server for the operator (`auth login SERVER`), and
//! one per server and principal (`auth login SERVER --principal P`, see
//! [`crate::config::OAuthConfig::per_principal`]).
//!
//! Each grant is sealed alone ([`GrantCipher`]): [`MAGIC`], a random 24-byte nonce and the
//! XChaCha20-Poly1305 encryption of the grant's JSON, with the server's name (and for a
//! principal's grant, the principal's name too) as associated data, so a sealed grant moved
//! to another server's or another principal's place does not open.
//!
//! Where they are kept ([`GrantStore`]):
//!
//! - **the state folder** ([`StateDirGrants`]): `oauth/SERVER.grant` for the operator's,
//!   `oauth/SERVER.principals/SHA256.grant` for a principal's (the SHA-256 of the principal's
//!   name in hex: any name makes a valid file name), each mode `0600`; the key is derived
//!   (HMAC-SHA256 with a label of its own) from the random key file [`KEY_FILE`] of the state
//!   folder (mode `0600`, created at first use). The state folder is withheld from every
//!   confined server (`crate::confine::default_denied`), so are these files;
//! - **PostgreSQL** with `store.postgres` ([`super::postgres::PgGrants`], table
//!   `toolward_oauth_grants`), the key derived the same way from `store.oauth_key`, which comes
//!   from the environment: a role that reads the table, or a backup of it, reads no token.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use cap_std::fs::Dir;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use reqwest::header::HeaderValue;
use serde::{Deserialize, Serialize};

use super::{OAuthError, now_secs};
use crate::state_dir::{KEY_BYTES, Key, StateDir};

/// The key file of the grants, in the state folder.
pub const KEY_FILE: &str = "oauth.key";

/// The folder of the grant files, in the state folder.
pub const GRANTS_DIR: &str = "oauth";

/// What a grant file's name ends with.
pub const GRANT_SUFFIX: &str = ".grant";

/// What the folder of a server's principals' grants is called after the server's name:
/// `oauth/SERVER.principals/`. A server's name holds no `.`, so it never collides with a
/// grant file.
pub const PRINCIPALS_SUFFIX: &str = ".principals";

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
    /// A person signed in on another device with a user code (RFC 8628); renewed with the
    /// refresh token, if any.
    Device,
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

/// One server's grant, the operator's or a principal's: the tokens and what it takes to renew
/// and revoke them. Its debug output leaves out every secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// The server's name.
    pub server: String,
    /// The principal whose grant it is (`auth login SERVER --principal P`); `None`: the
    /// operator's, which pinning and loading use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
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
            .field("principal", &self.principal)
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
                    principal: self.principal.clone(),
                    reason: String::from("its access token holds a character a header cannot"),
                }
            })?;
        value.set_sensitive(true);
        Ok(value)
    }
}

/// Seals and opens grants under one key: XChaCha20-Poly1305, a random nonce per seal, the
/// server's name (and the principal's) as associated data.
pub struct GrantCipher {
    cipher: XChaCha20Poly1305,
}

impl std::fmt::Debug for GrantCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GrantCipher(..)")
    }
}

/// The associated data of a grant of `server`: the server's name for the operator's grant (as
/// before principals had grants); for a principal's, the server's name, a NUL (which no
/// server name holds), `principal`, a NUL and `stem`, the SHA-256 of the principal's name in
/// hex ([`principal_file_stem`]), which a grant file's name gives without the name itself.
fn associated_data(server: &str, stem: Option<&str>) -> Vec<u8> {
    let mut aad = server.as_bytes().to_vec();
    if let Some(stem) = stem {
        aad.extend_from_slice(b"\0principal\0");
        aad.extend_from_slice(stem.as_bytes());
    }
    aad
}

impl GrantCipher {
    /// The cipher of the key derived from `key` (HMAC-SHA256 under [`KEY_LABEL`]).
    pub fn new(key: &Key) -> Result<GrantCipher, OAuthError> {
        let derived = hex::decode(key.mac_hex(&[KEY_LABEL])).map_err(|_| OAuthError::Store {
            server: String::from("*"),
            reason: String::from("the key could not be derived"),
        })?;
        let cipher =
            XChaCha20Poly1305::new_from_slice(&derived).map_err(|_| OAuthError::Store {
                server: String::from("*"),
                reason: String::from("the derived key has the wrong length"),
            })?;
        Ok(GrantCipher { cipher })
    }

    /// The cipher of a key given as [`KEY_BYTES`] bytes in hex (`store.oauth_key`).
    ///
    /// # Errors
    /// [`OAuthError::Store`] when `hex` is not 64 hex digits; the message never quotes it.
    pub fn from_hex(text: &str) -> Result<GrantCipher, OAuthError> {
        let bytes = hex::decode(text.trim())
            .ok()
            .and_then(|bytes| <[u8; KEY_BYTES]>::try_from(bytes).ok())
            .ok_or_else(|| OAuthError::Store {
                server: String::from("*"),
                reason: format!(
                    "`store.oauth_key` is not {KEY_BYTES} bytes in hex ({} hex digits; make one with `openssl rand -hex {KEY_BYTES}`)",
                    KEY_BYTES * 2
                ),
            })?;
        GrantCipher::new(&Key::from_bytes(bytes))
    }

    /// The sealed bytes of `grant` (a grant file's content, or a row's `sealed`).
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
        let stem = grant.principal.as_deref().map(principal_file_stem);
        let aad = associated_data(&grant.server, stem.as_deref());
        let sealed = self
            .cipher
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &plain,
                    aad: &aad,
                },
            )
            .map_err(|_| failed(String::from("the grant could not be encrypted")))?;
        let mut bytes = Vec::with_capacity(MAGIC.len() + NONCE_BYTES + sealed.len());
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&nonce);
        bytes.extend_from_slice(&sealed);
        Ok(bytes)
    }

    /// The grant of `server` and `principal` sealed in `bytes`; `place` names where they were
    /// read, for the error.
    ///
    /// # Errors
    /// [`OAuthError::Tampered`] when they do not open under this key as this server's and
    /// principal's grant.
    pub fn open(
        &self,
        server: &str,
        principal: Option<&str>,
        bytes: &[u8],
        place: &str,
    ) -> Result<Grant, OAuthError> {
        let stem = principal.map(principal_file_stem);
        self.open_stem(server, stem.as_deref(), bytes, place)
            .map_err(|_| OAuthError::Tampered {
                server: server.to_owned(),
                principal: principal.map(str::to_owned),
                path: place.to_owned(),
            })
    }

    /// The grant of `server` sealed in `bytes` for the principal whose name's SHA-256 is
    /// `stem` (`None`: the operator's): what a principal's grant file is opened with, its name
    /// giving only the stem. The grant inside must name a principal of that stem.
    ///
    /// # Errors
    /// [`OAuthError::Tampered`], naming no principal.
    pub fn open_stem(
        &self,
        server: &str,
        stem: Option<&str>,
        bytes: &[u8],
        place: &str,
    ) -> Result<Grant, OAuthError> {
        let tampered = || OAuthError::Tampered {
            server: server.to_owned(),
            principal: None,
            path: place.to_owned(),
        };
        let rest = bytes.strip_prefix(MAGIC).ok_or_else(tampered)?;
        if rest.len() < NONCE_BYTES {
            return Err(tampered());
        }
        let (nonce, sealed) = rest.split_at(NONCE_BYTES);
        let aad = associated_data(server, stem);
        let plain = self
            .cipher
            .decrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: sealed,
                    aad: &aad,
                },
            )
            .map_err(|_| tampered())?;
        let grant: Grant = serde_json::from_slice(&plain).map_err(|_| tampered())?;
        let grant_stem = grant.principal.as_deref().map(principal_file_stem);
        if grant.server != server || grant_stem.as_deref() != stem {
            return Err(tampered());
        }
        Ok(grant)
    }
}

/// One grant a store holds, as listed: whose it is, and the grant, or why it cannot be read.
#[derive(Debug)]
pub struct Listed {
    /// The server.
    pub server: String,
    /// The principal; `None` for the operator's grant.
    pub principal: Option<String>,
    /// The grant.
    pub grant: Result<Grant, OAuthError>,
}

/// The grants of a state folder: read, written and removed one at a time. The key file is
/// read (made at first use) only when a grant is written, or read from a file that exists: a
/// server never signed in to makes no key file and no grants folder.
pub struct StateDirGrants {
    state: StateDir,
    path: PathBuf,
    cipher: OnceLock<GrantCipher>,
}

impl std::fmt::Debug for StateDirGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StateDirGrants")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The error of the store as a whole, or of `server`'s grant.
fn store_error(server: &str, error: impl std::fmt::Display) -> OAuthError {
    OAuthError::Store {
        server: server.to_owned(),
        reason: error.to_string(),
    }
}

impl StateDirGrants {
    /// The grants of the state folder at `path` ([`GRANTS_DIR`], created `0700` at the first
    /// write; its key file [`KEY_FILE`], created `0600` from the system's random source at
    /// first use).
    ///
    /// # Errors
    /// [`OAuthError::Store`] when the state folder cannot be opened.
    pub fn open(path: &Path) -> Result<StateDirGrants, OAuthError> {
        let state = StateDir::open(path).map_err(|error| store_error("*", error))?;
        Ok(StateDirGrants {
            path: state.path().join(GRANTS_DIR),
            state,
            cipher: OnceLock::new(),
        })
    }

    fn cipher(&self) -> Result<&GrantCipher, OAuthError> {
        if let Some(cipher) = self.cipher.get() {
            return Ok(cipher);
        }
        let key = self
            .state
            .key(KEY_FILE)
            .map_err(|error| store_error("*", error))?;
        let cipher = GrantCipher::new(&key)?;
        Ok(self.cipher.get_or_init(|| cipher))
    }

    /// The path of the grant of `server` and `principal`, relative to the state folder.
    fn relative(server: &str, principal: Option<&str>) -> PathBuf {
        match principal {
            None => Path::new(GRANTS_DIR).join(format!("{server}{GRANT_SUFFIX}")),
            Some(principal) => Path::new(GRANTS_DIR)
                .join(format!("{server}{PRINCIPALS_SUFFIX}"))
                .join(format!("{}{GRANT_SUFFIX}", principal_file_stem(principal))),
        }
    }

    /// The file of the grant of `server` and `principal`, for messages.
    pub fn file(&self, server: &str, principal: Option<&str>) -> PathBuf {
        self.state.path().join(Self::relative(server, principal))
    }

    /// The grant of `server` and `principal`, `None` when there is none.
    ///
    /// # Errors
    /// [`OAuthError::Tampered`] when the file does not decrypt under the key as this server's
    /// and principal's grant; [`OAuthError::Store`] when it cannot be read (a wrong owner or
    /// mode, a symlink, larger than [`MAX_GRANT_FILE_BYTES`]).
    pub fn read(&self, server: &str, principal: Option<&str>) -> Result<Option<Grant>, OAuthError> {
        let relative = Self::relative(server, principal);
        let full = self.state.path().join(&relative);
        // Each folder on the way is checked as the state folder's own are.
        let Some(parent) = relative.parent() else {
            return Ok(None);
        };
        if let Err(error) = self.state.dir().symlink_metadata(parent)
            && error.kind() == std::io::ErrorKind::NotFound
        {
            return Ok(None);
        }
        let dir = self
            .state
            .subdir(parent)
            .map_err(|error| store_error(server, error))?;
        let Some(name) = relative.file_name() else {
            return Ok(None);
        };
        let file = match crate::state_dir::open_private_in(&dir, Path::new(name), &full) {
            Ok(file) => file,
            Err(error) if error.not_found() => return Ok(None),
            Err(error) => return Err(store_error(server, error)),
        };
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(file, MAX_GRANT_FILE_BYTES + 1),
            &mut bytes,
        )
        .map_err(|error| store_error(server, format!("`{}`: {error}", full.display())))?;
        if bytes.len() as u64 > MAX_GRANT_FILE_BYTES {
            return Err(store_error(
                server,
                format!(
                    "`{}` is larger than the limit of {MAX_GRANT_FILE_BYTES} bytes",
                    full.display()
                ),
            ));
        }
        self.cipher()?
            .open(
                server,
                principal,
                &bytes,
                &format!("file `{}`", full.display()),
            )
            .map(Some)
    }

    /// Writes `grant` as its server's (and principal's) grant, replacing the one before.
    ///
    /// # Errors
    /// [`OAuthError::Store`].
    pub fn write(&self, grant: &Grant) -> Result<(), OAuthError> {
        let bytes = self.cipher()?.seal(grant)?;
        let relative = Self::relative(&grant.server, grant.principal.as_deref());
        let (Some(parent), Some(name)) = (relative.parent(), relative.file_name()) else {
            return Err(store_error(&grant.server, "no place for the grant file"));
        };
        let dir = self
            .state
            .subdir(parent)
            .map_err(|error| store_error(&grant.server, error))?;
        crate::state_dir::replace_private_in(
            &dir,
            &name.to_string_lossy(),
            &bytes,
            &self.state.path().join(&relative),
        )
        .map_err(|error| store_error(&grant.server, error))
    }

    /// Removes the grant of `server` and `principal`; whether there was one.
    ///
    /// # Errors
    /// [`OAuthError::Store`].
    pub fn remove(&self, server: &str, principal: Option<&str>) -> Result<bool, OAuthError> {
        let relative = Self::relative(server, principal);
        match self.state.dir().remove_file(&relative) {
            Ok(()) => Ok(true),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(error) => Err(store_error(
                server,
                format!("`{}`: {error}", self.state.path().join(&relative).display()),
            )),
        }
    }

    /// Every grant, sorted by server, the operator's first, then by principal: each read and
    /// decrypted (a principal's name is only inside its file).
    ///
    /// # Errors
    /// [`OAuthError::Store`] when the grants folder cannot be listed.
    pub fn list(&self) -> Result<Vec<Listed>, OAuthError> {
        if let Err(error) = self.state.dir().symlink_metadata(GRANTS_DIR)
            && error.kind() == std::io::ErrorKind::NotFound
        {
            return Ok(Vec::new());
        }
        let dir = self
            .state
            .subdir(GRANTS_DIR)
            .map_err(|error| store_error("*", error))?;
        let names = |dir: &Dir, path: &Path| -> Result<Vec<String>, OAuthError> {
            let entries = dir
                .entries()
                .map_err(|error| store_error("*", format!("`{}`: {error}", path.display())))?;
            Ok(entries
                .filter_map(Result::ok)
                .filter_map(|entry| entry.file_name().into_string().ok())
                .filter(|name| !name.starts_with('.'))
                .collect())
        };
        let mut listed = Vec::new();
        for name in names(&dir, &self.path)? {
            if let Some(server) = name.strip_suffix(GRANT_SUFFIX) {
                listed.push(Listed {
                    server: server.to_owned(),
                    principal: None,
                    grant: self.read(server, None).and_then(|grant| {
                        grant.ok_or_else(|| store_error(server, "the grant file went away"))
                    }),
                });
            } else if let Some(server) = name.strip_suffix(PRINCIPALS_SUFFIX) {
                let folder = self.path.join(&name);
                let principals = self
                    .state
                    .subdir(Path::new(GRANTS_DIR).join(&name))
                    .map_err(|error| store_error(server, error))?;
                for file in names(&principals, &folder)? {
                    if !file.ends_with(GRANT_SUFFIX) {
                        continue;
                    }
                    listed.push(self.read_principal_file(server, &principals, &folder, &file));
                }
            }
        }
        listed.sort_by(|a, b| (&a.server, &a.principal).cmp(&(&b.server, &b.principal)));
        Ok(listed)
    }

    /// A principal's grant file, whose name gives the SHA-256 of the principal's name: opened
    /// with that, and the name read from inside.
    fn read_principal_file(&self, server: &str, dir: &Dir, folder: &Path, file: &str) -> Listed {
        let full = folder.join(file);
        let place = format!("file `{}`", full.display());
        let stem = file.strip_suffix(GRANT_SUFFIX).unwrap_or(file);
        let grant = crate::state_dir::open_private_in(dir, Path::new(file), &full)
            .map_err(|error| store_error(server, error))
            .and_then(|file| {
                let mut bytes = Vec::new();
                std::io::Read::read_to_end(
                    &mut std::io::Read::take(file, MAX_GRANT_FILE_BYTES + 1),
                    &mut bytes,
                )
                .map_err(|error| store_error(server, format!("{place}: {error}")))?;
                if bytes.len() as u64 > MAX_GRANT_FILE_BYTES {
                    return Err(store_error(
                        server,
                        format!("{place} is larger than the limit of {MAX_GRANT_FILE_BYTES} bytes"),
                    ));
                }
                self.cipher()?.open_stem(server, Some(stem), &bytes, &place)
            });
        Listed {
            server: server.to_owned(),
            principal: grant
                .as_ref()
                .ok()
                .and_then(|grant| grant.principal.clone()),
            grant,
        }
    }
}

/// The stem of a principal's grant file: the SHA-256 of its name, lowercase hex.
pub fn principal_file_stem(principal: &str) -> String {
    use sha2::Digest as _;
    hex::encode(sha2::Sha256::digest(principal.as_bytes()))
}

/// Where the grants are kept: the state folder, or the fleet's PostgreSQL store
/// (`store.postgres`). Opened once per command or gateway and shared by every grant in use.
#[derive(Debug)]
pub enum GrantStore {
    /// The state folder (no `store`).
    StateDir(StateDirGrants),
    /// PostgreSQL (`store.postgres`), sealed under `store.oauth_key` (boxed: it holds the
    /// pool).
    #[cfg(feature = "postgres")]
    Postgres(Box<super::postgres::PgGrants>),
}

impl GrantStore {
    /// The grants of `config`'s store: its state folder, or with `store.postgres` the
    /// database's `toolward_oauth_grants` (its schema checked: `toolward store migrate` makes
    /// the table).
    ///
    /// # Errors
    /// [`OAuthError::Store`]: the state folder cannot be opened; the database cannot be
    /// reached or is not migrated; `store.oauth_key` is not a key; `store.postgres` in a build
    /// without the `postgres` feature.
    pub async fn open(config: &crate::config::Config) -> Result<GrantStore, OAuthError> {
        match &config.store {
            crate::config::StoreConfig::StateDir => Ok(GrantStore::StateDir(StateDirGrants::open(
                &config.state_dir,
            )?)),
            #[cfg(feature = "postgres")]
            crate::config::StoreConfig::Postgres { url, oauth_key } => {
                let cipher = oauth_key
                    .as_deref()
                    .map(GrantCipher::from_hex)
                    .transpose()?;
                let mut store =
                    crate::database::PgStore::new(url).map_err(|error| store_error("*", error))?;
                if let Some(file) = &config.file {
                    store = store.with_config_file(file);
                }
                let grants = super::postgres::PgGrants::open(&store, cipher)
                    .await
                    .map_err(|error| store_error("*", error))?;
                Ok(GrantStore::Postgres(Box::new(grants)))
            }
            crate::config::StoreConfig::Memory => Err(store_error(
                "*",
                "signing in to HTTP servers keeps grants in a state folder, and this toolward has none",
            )),
            #[cfg(not(feature = "postgres"))]
            crate::config::StoreConfig::Postgres { .. } => Err(store_error(
                "*",
                "`store.postgres` needs the `postgres` feature of the `toolward` crate",
            )),
        }
    }

    /// Where the grant of `server` and `principal` is kept, for messages: a file, or a row.
    pub fn place(&self, server: &str, principal: Option<&str>) -> String {
        match self {
            GrantStore::StateDir(grants) => {
                format!("`{}`", grants.file(server, principal).display())
            }
            #[cfg(feature = "postgres")]
            GrantStore::Postgres(grants) => grants.place(server, principal),
        }
    }

    /// The grant of `server` and `principal`, `None` when there is none.
    ///
    /// # Errors
    /// [`OAuthError::Tampered`], [`OAuthError::Store`].
    pub async fn read(
        &self,
        server: &str,
        principal: Option<&str>,
    ) -> Result<Option<Grant>, OAuthError> {
        match self {
            GrantStore::StateDir(grants) => grants.read(server, principal),
            #[cfg(feature = "postgres")]
            GrantStore::Postgres(grants) => grants.read(server, principal).await,
        }
    }

    /// Writes `grant`, replacing its server's (and principal's) grant before it.
    ///
    /// # Errors
    /// [`OAuthError::Store`].
    pub async fn write(&self, grant: &Grant) -> Result<(), OAuthError> {
        match self {
            GrantStore::StateDir(grants) => grants.write(grant),
            #[cfg(feature = "postgres")]
            GrantStore::Postgres(grants) => grants.write(grant).await,
        }
    }

    /// Removes the grant of `server` and `principal`; whether there was one.
    ///
    /// # Errors
    /// [`OAuthError::Store`].
    pub async fn remove(&self, server: &str, principal: Option<&str>) -> Result<bool, OAuthError> {
        match self {
            GrantStore::StateDir(grants) => grants.remove(server, principal),
            #[cfg(feature = "postgres")]
            GrantStore::Postgres(grants) => grants.remove(server, principal).await,
        }
    }

    /// Every grant kept, by server (the operator's first), then principal.
    ///
    /// # Errors
    /// [`OAuthError::Store`].
    pub async fn list(&self) -> Result<Vec<Listed>, OAuthError> {
        match self {
            GrantStore::StateDir(grants) => grants.list(),
            #[cfg(feature = "postgres")]
            GrantStore::Postgres(grants) => grants.list().await,
        }
    }
}
