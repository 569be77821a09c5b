//! Grants in the fleet's PostgreSQL store (`store.postgres`): table `toolward_oauth_grants`
//! (schema version 5, made by `toolward store migrate`), one row per server and principal
//! (`''` for the operator's grant), holding the grant sealed by [`GrantCipher`] under the key
//! of `store.oauth_key`, which comes from the environment. Every gateway of the fleet reads
//! and renews the same grants; a role that reads the table (or a backup of it) without the
//! key reads no token, and a sealed grant copied to another row does not open (the server and
//! the principal are its associated data).

use deadpool_postgres::Pool;

use super::OAuthError;
use super::store::{Grant, GrantCipher, Listed};
use crate::database::{PgError, PgStore, now_ms};

/// The grants of a PostgreSQL store.
pub struct PgGrants {
    store: PgStore,
    pool: Pool,
    /// `None` without `store.oauth_key`: no grant can be written, and one found cannot be
    /// opened.
    cipher: Option<GrantCipher>,
}

impl std::fmt::Debug for PgGrants {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgGrants")
            .field("store", &self.store.name())
            .field("key", &self.cipher.is_some())
            .finish_non_exhaustive()
    }
}

/// The row of the grant of `principal`: `''` for the operator's (no principal is empty).
fn principal_column(principal: Option<&str>) -> &str {
    principal.unwrap_or("")
}

impl PgGrants {
    /// The grants of `store`, sealed under `cipher` (`None` when `store.oauth_key` is not
    /// set).
    ///
    /// # Errors
    /// As [`PgStore::check_schema`]: the database cannot be reached, or holds no schema of
    /// this toolward's version.
    pub async fn open(store: &PgStore, cipher: Option<GrantCipher>) -> Result<PgGrants, PgError> {
        let pool = store.pool()?;
        store.check_schema(&pool).await?;
        Ok(PgGrants {
            store: store.clone(),
            pool,
            cipher,
        })
    }

    /// The store as messages name it.
    pub fn name(&self) -> &str {
        self.store.name()
    }

    /// Where the grant of `server` and `principal` is, for messages.
    pub fn place(&self, server: &str, principal: Option<&str>) -> String {
        match principal {
            None => format!(
                "the operator's row of server `{server}` in `toolward_oauth_grants` of PostgreSQL store {}",
                self.name()
            ),
            Some(principal) => format!(
                "the row of server `{server}` and principal `{}` in `toolward_oauth_grants` of PostgreSQL store {}",
                crate::text::quote(principal, crate::text::MAX_QUOTED_BYTES),
                self.name()
            ),
        }
    }

    fn cipher(&self, server: &str) -> Result<&GrantCipher, OAuthError> {
        self.cipher.as_ref().ok_or_else(|| OAuthError::Store {
            server: server.to_owned(),
            reason: format!(
                "grants are kept in PostgreSQL store {}, encrypted under `store.oauth_key`, which the config does not set: set it to `${{TOOLWARD_OAUTH_KEY}}`, the same 32 bytes in hex on every gateway (docs/oauth.md)",
                self.name()
            ),
        })
    }

    fn failed(&self, server: &str, error: PgError) -> OAuthError {
        OAuthError::Store {
            server: server.to_owned(),
            reason: error.to_string(),
        }
    }

    /// The grant of `server` and `principal`, `None` when there is none. Without a key,
    /// `None` when there is no row.
    ///
    /// # Errors
    /// [`OAuthError::Tampered`] when the row does not open as this server's and principal's
    /// grant; [`OAuthError::Store`] when the database fails, or a row is there and no key.
    pub async fn read(
        &self,
        server: &str,
        principal: Option<&str>,
    ) -> Result<Option<Grant>, OAuthError> {
        const ACTION: &str = "read an OAuth grant";
        let column = principal_column(principal);
        let sealed: Option<Vec<u8>> = self
            .store
            .timed(ACTION, async {
                let client = self
                    .pool
                    .get()
                    .await
                    .map_err(|e| self.store.connect_error(e))?;
                let row = client
                    .query_opt(
                        "SELECT sealed FROM toolward_oauth_grants WHERE server = $1 AND principal = $2",
                        &[&server, &column],
                    )
                    .await
                    .map_err(|e| self.store.query_error(ACTION, e))?;
                Ok(row.map(|row| row.get(0)))
            })
            .await
            .map_err(|error| self.failed(server, error))?;
        let Some(sealed) = sealed else {
            return Ok(None);
        };
        self.cipher(server)?
            .open(server, principal, &sealed, &self.place(server, principal))
            .map(Some)
    }

    /// Writes `grant` as its server's (and principal's) grant, replacing the one before.
    ///
    /// # Errors
    /// [`OAuthError::Store`]: no key, or the database fails (the role may lack the rights of
    /// docs/fleet.md).
    pub async fn write(&self, grant: &Grant) -> Result<(), OAuthError> {
        const ACTION: &str = "write an OAuth grant";
        let sealed = self.cipher(&grant.server)?.seal(grant)?;
        let column = principal_column(grant.principal.as_deref());
        let now = now_ms();
        self.store.timed(ACTION, async {
            let client = self
                .pool
                .get()
                .await
                .map_err(|e| self.store.connect_error(e))?;
            client
                .execute(
                    "INSERT INTO toolward_oauth_grants (server, principal, sealed, updated_at_ms) VALUES ($1, $2, $3, $4) \
                     ON CONFLICT (server, principal) DO UPDATE SET sealed = EXCLUDED.sealed, updated_at_ms = EXCLUDED.updated_at_ms",
                    &[&grant.server, &column, &sealed, &now],
                )
                .await
                .map_err(|e| self.store.query_error(ACTION, e))?;
            Ok(())
        })
        .await
        .map_err(|error| self.failed(&grant.server, error))
    }

    /// Removes the grant of `server` and `principal`; whether there was one.
    ///
    /// # Errors
    /// [`OAuthError::Store`].
    pub async fn remove(&self, server: &str, principal: Option<&str>) -> Result<bool, OAuthError> {
        const ACTION: &str = "delete an OAuth grant";
        let column = principal_column(principal);
        self.store
            .timed(ACTION, async {
                let client = self
                    .pool
                    .get()
                    .await
                    .map_err(|e| self.store.connect_error(e))?;
                let removed = client
                    .execute(
                        "DELETE FROM toolward_oauth_grants WHERE server = $1 AND principal = $2",
                        &[&server, &column],
                    )
                    .await
                    .map_err(|e| self.store.query_error(ACTION, e))?;
                Ok(removed > 0)
            })
            .await
            .map_err(|error| self.failed(server, error))
    }

    /// Every grant, by server, the operator's first, then by principal, each opened (or why
    /// it cannot be).
    ///
    /// # Errors
    /// [`OAuthError::Store`] when the database fails.
    pub async fn list(&self) -> Result<Vec<Listed>, OAuthError> {
        const ACTION: &str = "list the OAuth grants";
        let rows: Vec<(String, String, Vec<u8>)> = self
            .store
            .timed(ACTION, async {
                let client = self
                    .pool
                    .get()
                    .await
                    .map_err(|e| self.store.connect_error(e))?;
                let rows = client
                    .query(
                        "SELECT server, principal, sealed FROM toolward_oauth_grants ORDER BY server, principal COLLATE \"C\"",
                        &[],
                    )
                    .await
                    .map_err(|e| self.store.query_error(ACTION, e))?;
                Ok(rows
                    .iter()
                    .map(|row| (row.get(0), row.get(1), row.get(2)))
                    .collect())
            })
            .await
            .map_err(|error| self.failed("*", error))?;
        Ok(rows
            .into_iter()
            .map(|(server, principal, sealed)| {
                let principal = (!principal.is_empty()).then_some(principal);
                let grant = self.cipher(&server).and_then(|cipher| {
                    cipher.open(
                        &server,
                        principal.as_deref(),
                        &sealed,
                        &self.place(&server, principal.as_deref()),
                    )
                });
                Listed {
                    server,
                    principal,
                    grant,
                }
            })
            .collect())
    }
}
