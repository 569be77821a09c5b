//! Validators for a tool's `inputSchema` and `outputSchema`, compiled by the `jsonschema`
//! crate offline: the load checks that every schema compiles, the call path validates with
//! them.

use super::Dialect;
use crate::canonical::Value;

/// A validator for `schema` under `dialect`, offline: the `jsonschema` crate never reads a
/// file or fetches a URL for it.
///
/// # Errors
/// The schema's problem, values masked.
pub fn build_validator(schema: &Value, dialect: Dialect) -> Result<jsonschema::Validator, String> {
    compile(schema, dialect).map_err(|problem| problem.reason)
}

/// Why a schema cannot be compiled into a validator (see [`check_validator`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorProblem {
    /// The JSON Pointer of the place in the schema the validator refuses (`""`: the root).
    pub pointer: String,
    /// What is wrong there, values masked.
    pub reason: String,
}

/// Checks that `schema` compiles into a validator under `dialect`, as every call of the tool
/// will need: load refuses a tool whose schema passes toolward's own checks but not the
/// validator's (an `items` array under 2020-12, a `pattern` that is not a regular
/// expression), rather than offer a tool whose every call would fail.
///
/// # Errors
/// The place and the problem.
pub fn check_validator(schema: &Value, dialect: Dialect) -> Result<(), ValidatorProblem> {
    compile(schema, dialect).map(|_| ())
}

fn compile(schema: &Value, dialect: Dialect) -> Result<jsonschema::Validator, ValidatorProblem> {
    let draft = match dialect {
        Dialect::Draft7 => jsonschema::Draft::Draft7,
        Dialect::Draft201909 => jsonschema::Draft::Draft201909,
        Dialect::Draft202012 => jsonschema::Draft::Draft202012,
    };
    // `to_serde_json` is lossy for numbers beyond `i64`/`u64` and non-`f64` decimals: a bound
    // such as `9007199254740993` is compared as the nearest `f64`. The pinned hash still
    // covers the exact text.
    jsonschema::options()
        .with_draft(draft)
        .offline()
        .build(&schema.to_serde_json())
        .map_err(|error| ValidatorProblem {
            // Compiling validates the schema as an instance of its meta-schema: the instance
            // path is the place in the schema.
            pointer: error.instance_path().to_string(),
            reason: error.masked().to_string(),
        })
}
