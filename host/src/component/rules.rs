//! The rules path: a configured `rules` export and the classifier that asks it about each tool.

use std::fmt;
use wasmtime::Store;
use wasmtime::component::InstancePre;
use super::{Classification, ComponentHost, GuestState, ToolView, effect_from_wit, guest_failure, short, wasi, wit, wit_rules};

/// A configured `rules` export.
pub struct Rules {
    pub(super) host: ComponentHost,
    pub(super) pre: InstancePre<GuestState>,
    pub(super) indices: wit_rules::GuestIndices,
    pub(super) sha256: String,
    /// Whether the component imports WASI (calls then run through [`wasi::off_runtime`]).
    pub(super) wasi: bool,
}

impl fmt::Debug for Rules {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rules")
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

impl Rules {
    /// SHA-256 of the component, lowercase hex.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// One instance of the configured snapshot for a whole load.
    ///
    /// # Errors
    /// A reason naming the component when no instance can be made.
    pub fn classifier(&self) -> Result<Classifier, String> {
        let mut store = self.host.store(0, self.wasi);
        let instance = self.pre.instantiate(&mut store).map_err(|e| {
            format!(
                "rules component `{}` could not be instantiated: {e}",
                short(&self.sha256)
            )
        })?;
        let guest = self.indices.load(&mut store, &instance).map_err(|e| {
            format!(
                "rules component `{}` has an unusable `classify` export: {e}",
                short(&self.sha256)
            )
        })?;
        Ok(Classifier {
            store,
            guest,
            sha256: self.sha256.clone(),
            fuel: self.host.inner.limits.classify_fuel,
            memory_bytes: self.host.inner.limits.memory_bytes,
            broken: None,
            wasi: self.wasi,
        })
    }
}

/// Classifies the tools of one load in one instance.
pub struct Classifier {
    store: Store<GuestState>,
    guest: wit_rules::Guest,
    sha256: String,
    fuel: u64,
    memory_bytes: usize,
    broken: Option<String>,
    wasi: bool,
}

impl fmt::Debug for Classifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Classifier")
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

impl Classifier {
    /// The operator's classification of `tool`; `Ok(None)` when unclassified.
    ///
    /// # Errors
    /// A reason naming the component when the guest trapped, ran out of fuel or memory:
    /// the tool is refused. After a failure the instance is not trusted again, and every
    /// later tool of the load is refused with the same reason.
    pub fn classify(&mut self, tool: &ToolView) -> Result<Option<Classification>, String> {
        if let Some(reason) = &self.broken {
            return Err(reason.clone());
        }
        let _ = self.store.set_fuel(self.fuel);
        let a = &tool.annotations;
        let wit_tool = wit::Tool {
            server: &tool.server,
            name: &tool.name,
            description: &tool.description,
            input_schema: &tool.input_schema,
            annotations: wit::Annotations {
                title: a.title.as_deref(),
                read_only_hint: a.read_only_hint,
                destructive_hint: a.destructive_hint,
                idempotent_hint: a.idempotent_hint,
                open_world_hint: a.open_world_hint,
            },
            description_sha256: &tool.description_sha256,
            input_schema_sha256: &tool.input_schema_sha256,
        };
        let classified = if self.wasi {
            let (guest, store) = (&self.guest, &mut self.store);
            wasi::off_runtime(|| guest.call_classify(store, wit_tool))
        } else {
            self.guest.call_classify(&mut self.store, wit_tool)
        };
        match classified {
            Ok(None) => Ok(None),
            Ok(Some(c)) => Ok(Some(Classification {
                effect: effect_from_wit(c.effect),
                denied_parameters: c.denied_parameters,
                fixed_parameters: c
                    .fixed_parameters
                    .into_iter()
                    .map(|p| (p.name, p.value))
                    .collect(),
                description_override: c.description_override,
                allow_hint_mismatch: c.allow_hint_mismatch,
            })),
            Err(e) => {
                let reason = format!(
                    "rules component `{}` {}",
                    short(&self.sha256),
                    guest_failure(&self.store, &e, self.fuel, self.memory_bytes)
                );
                self.broken = Some(reason.clone());
                Err(reason)
            }
        }
    }
}
