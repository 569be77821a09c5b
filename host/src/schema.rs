//! Schema soundness and narrowing: what toolward accepts as a tool's `inputSchema` (and
//! `outputSchema`), and the narrowed `inputSchema` the model sees once the operator's denied
//! and fixed parameters are hidden.
//!
//! Everything here works on [`crate::canonical::Value`], the exact form of the schema the
//! server sent, and refuses rather than repairs: each refusal is a [`SchemaRefusal`] that
//! carries the RFC 6901 JSON Pointer of the offending place in the schema. The caller (load)
//! names the tool and server the refusal is about.
//!
//! # The checks ([`check_input_schema`], [`check_output_schema`])
//!
//! In this order:
//!
//! 1. **Depth.** No value in the document nests deeper than [`MAX_SCHEMA_DEPTH`]; checked
//!    first, without recursion, so that every later walk is bounded.
//! 2. **Root.** The root is an object schema (not a boolean schema) whose `type` is the string
//!    `"object"`, as the MCP specification (2025-11-25, `Tool.inputSchema` and
//!    `Tool.outputSchema`) requires.
//! 3. **Dialect.** The root `$schema` names draft-07, 2019-09 or 2020-12 (see [`Dialect`]);
//!    absent means 2020-12, the MCP default. A `$schema` deeper in the document must also name
//!    one of these dialects: an unknown meta-schema is something a validator would fetch.
//! 4. **Shape.** Every keyword that holds subschemas (`properties`, `items`, `allOf`, `$defs`,
//!    …, the union over the three dialects) holds objects or booleans where a schema goes;
//!    boolean subschemas are legal anywhere below the root.
//! 5. **References.** Every `$ref`, `$dynamicRef` and `$recursiveRef` stays inside the
//!    document, under this rule:
//!    - it must start with `#` (a same-document reference). Anything else — `http:`, `https:`,
//!      `file:`, `urn:`, a relative path such as `other.json`, even the empty string — is
//!      refused, before anything could be read or fetched;
//!    - `#` is the root; `#/…` is a JSON Pointer (percent-decoded, then RFC 6901) that must
//!      name a place where the document holds a subschema (found by walking the subschema
//!      keywords, so a pointer into `enum`, `default` or an unknown keyword is refused);
//!      `#name` must name an anchor of the document: `$anchor` (2019-09, 2020-12),
//!      `$dynamicAnchor` (2020-12), or a fragment-only `$id` such as `"#name"` (draft-07);
//!    - `$id` at the root may be anything: it names the document, so `#…` still resolves in
//!      the document. A `$id` below the root that does not start with `#` starts an embedded
//!      resource with a base URI of its own; a `#…` reference inside it (including one in the
//!      same object as the `$id`) would resolve against that resource, so toolward refuses
//!      it rather than resolve it. Anchors inside such a resource are not anchors of the
//!      document. Recursive references (`"$ref": "#"`, or to an enclosing definition) are
//!      legal.
//!
//! # Narrowing ([`narrow`])
//!
//! The operator's denied and fixed parameters (top-level property names, together "hidden")
//! are removed from the root `properties` and `required` (an emptied `required` is dropped).
//! The tool is refused, not partly rewritten, when the schema could still depend on a hidden
//! name:
//!
//! - a hidden name that is not a key of the root `properties` (the operator's rule names a
//!   parameter the tool does not have);
//! - any mention of the name as a `properties` key, a `required` entry, a `dependentRequired`,
//!   `dependentSchemas` or `dependencies` key or listed name, anywhere inside a subschema that
//!   applies to the root arguments object — a root `allOf`, `anyOf`, `oneOf`, `not`, `if`,
//!   `then`, `else`, `dependentSchemas` or `dependencies` subschema, followed through those
//!   keywords and through `$ref`/`$dynamicRef`/`$recursiveRef` — and anywhere inside any
//!   `$defs` or `definitions` entry (whether or not it is used at the root), and in the root's
//!   own `dependentRequired`, `dependentSchemas` and `dependencies`;
//! - `patternProperties` or `propertyNames` (other than `true` or `{}`) in a subschema that
//!   applies to the root arguments object: toolward does not evaluate ECMA-262 patterns, so it
//!   cannot tell whether they match a hidden name;
//! - a root-level `enum`, `const`, `default` or `examples` that holds an object with the name
//!   as a key;
//! - a reference whose target is the root (it would see the narrowed root) or lies inside a
//!   hidden parameter's subschema (it would dangle).
//!
//! A root that allows additional properties (`additionalProperties` absent or not `false`)
//! still lets a call carry a hidden name; narrowing does not refuse that, because the call
//! path refuses hidden names by name before validating arguments.
//!
//! # Output schemas
//!
//! [`check_output_schema`] applies the same checks to `outputSchema`; nothing is narrowed.

use std::collections::{HashMap, HashSet};

use crate::canonical::{Value, push_pointer_token};

pub mod validator;

/// The deepest nesting a schema document may have, in JSON levels: the root is level 0 and
/// each array element or object member is one level deeper than its container (so one level
/// of `properties` costs two). Real tool schemas nest well under 20; the bound keeps every
/// walk over an untrusted schema short and its recursion shallow.
pub const MAX_SCHEMA_DEPTH: usize = 64;

/// The JSON Schema dialect a schema is written in, from its root `$schema` keyword.
///
/// The call path validates arguments under this dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// Draft-07: `http://json-schema.org/draft-07/schema#`.
    Draft7,
    /// Draft 2019-09: `https://json-schema.org/draft/2019-09/schema`.
    Draft201909,
    /// Draft 2020-12: `https://json-schema.org/draft/2020-12/schema`; also the dialect of a
    /// schema without `$schema` (MCP specification 2025-11-25).
    Draft202012,
}

impl Dialect {
    /// The dialect of a schema that has no `$schema` keyword (MCP specification 2025-11-25).
    pub const DEFAULT: Dialect = Dialect::Draft202012;

    /// The canonical meta-schema URI of this dialect, as the `$schema` keyword writes it.
    pub fn meta_schema_uri(self) -> &'static str {
        match self {
            Dialect::Draft7 => "http://json-schema.org/draft-07/schema#",
            Dialect::Draft201909 => "https://json-schema.org/draft/2019-09/schema",
            Dialect::Draft202012 => "https://json-schema.org/draft/2020-12/schema",
        }
    }

    /// The dialect a `$schema` URI names, or `None` for any other URI.
    ///
    /// A trailing `#` (empty fragment) is ignored, and `http` and `https` are both accepted,
    /// as the validator (`jsonschema`) accepts them: `http://json-schema.org/draft-07/schema`,
    /// `https://json-schema.org/draft-07/schema#`, `https://json-schema.org/draft/2020-12/schema#`
    /// and so on. The version-less `https://json-schema.org/schema` is not accepted.
    pub fn from_uri(uri: &str) -> Option<Dialect> {
        let uri = uri.strip_suffix('#').unwrap_or(uri);
        let rest = uri
            .strip_prefix("https://")
            .or_else(|| uri.strip_prefix("http://"))?;
        match rest {
            "json-schema.org/draft-07/schema" => Some(Dialect::Draft7),
            "json-schema.org/draft/2019-09/schema" => Some(Dialect::Draft201909),
            "json-schema.org/draft/2020-12/schema" => Some(Dialect::Draft202012),
            _ => None,
        }
    }

    /// The dialect of a schema document, from its root `$schema` keyword; [`Dialect::DEFAULT`]
    /// when the root has no `$schema` or is not an object.
    ///
    /// # Errors
    ///
    /// [`SchemaRefusal::UnknownDialect`] when `$schema` names no dialect toolward knows;
    /// [`SchemaRefusal::Malformed`] when `$schema` is not a string.
    pub fn of(schema: &Value) -> Result<Dialect, SchemaRefusal> {
        match schema {
            Value::Object(members) => dialect_of(members, ""),
            _ => Ok(Dialect::DEFAULT),
        }
    }
}

/// Why toolward refuses a tool's schema. Every variant carries the JSON Pointer (RFC 6901,
/// escaped; `""` is the root) of the offending place in the schema, see
/// [`SchemaRefusal::pointer`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaRefusal {
    /// The document nests past [`MAX_SCHEMA_DEPTH`].
    #[error("schema nests {depth} levels deep at {}, past the limit of {limit}", at(.pointer))]
    TooDeep {
        /// The first place past the limit.
        pointer: String,
        /// How deep that place is.
        depth: usize,
        /// [`MAX_SCHEMA_DEPTH`].
        limit: usize,
    },
    /// The root is not an object schema (MCP: `inputSchema` and `outputSchema` are objects
    /// with `type` `object`).
    #[error("the schema root is {found}, not an object schema")]
    RootNotObject {
        /// Always `""`.
        pointer: String,
        /// What the root is instead, such as `a boolean schema`.
        found: &'static str,
    },
    /// The root's `type` keyword is missing or is not the string `"object"`.
    #[error("the schema root has {found} where `type` `object` is required")]
    RootTypeNotObject {
        /// `/type`, or `""` when the root has no `type`.
        pointer: String,
        /// What the root has instead, such as ``no `type` ``.
        found: String,
    },
    /// A `$schema` keyword names a meta-schema other than the dialects of [`Dialect`].
    #[error(
        "`$schema` `{uri}` at {} names an unknown dialect (toolward knows draft-07, 2019-09 and 2020-12)",
        at(.pointer)
    )]
    UnknownDialect {
        /// Where the `$schema` keyword is.
        pointer: String,
        /// The URI it names.
        uri: String,
    },
    /// A keyword's value has the wrong JSON type (such as `allOf` that is not an array).
    #[error("`{keyword}` at {} is not {expected}", at(.pointer))]
    Malformed {
        /// Where the keyword's value is.
        pointer: String,
        /// The keyword.
        keyword: String,
        /// What it must be, such as `an array of schemas`.
        expected: &'static str,
    },
    /// A place that must hold a subschema holds something other than an object or a boolean.
    #[error("the value at {} is not a schema (an object or a boolean)", at(.pointer))]
    NotASchema {
        /// Where the value is.
        pointer: String,
    },
    /// A reference that does not start with `#`: a URL, a file, a relative path.
    #[error("`{keyword}` `{reference}` at {} refers outside the schema", at(.pointer))]
    ExternalRef {
        /// The schema object holding the reference.
        pointer: String,
        /// `$ref`, `$dynamicRef` or `$recursiveRef`.
        keyword: &'static str,
        /// The reference as written.
        reference: String,
    },
    /// A `#` reference inside an embedded resource (below a non-root `$id` that is not a
    /// fragment), which would resolve against that resource's base URI.
    #[error(
        "`{keyword}` `{reference}` at {} resolves against `$id` `{id}` at {}, not against the schema document",
        at(.pointer),
        at(.id_pointer)
    )]
    RefUnderId {
        /// The schema object holding the reference.
        pointer: String,
        /// `$ref`, `$dynamicRef` or `$recursiveRef`.
        keyword: &'static str,
        /// The reference as written.
        reference: String,
        /// The `$id` that changes the base URI.
        id: String,
        /// The schema object holding that `$id`.
        id_pointer: String,
    },
    /// A `#` reference that names no subschema or anchor of the document.
    #[error(
        "`{keyword}` `{reference}` at {} does not resolve to a subschema of the schema",
        at(.pointer)
    )]
    DanglingRef {
        /// The schema object holding the reference.
        pointer: String,
        /// `$ref`, `$dynamicRef` or `$recursiveRef`.
        keyword: &'static str,
        /// The reference as written.
        reference: String,
    },
    /// The operator hides a parameter that is not a key of the root `properties`.
    #[error("hidden parameter `{name}` is not a property of the schema")]
    HiddenNotAProperty {
        /// `/properties`, or `""` when the root has no `properties`.
        pointer: String,
        /// The hidden parameter.
        name: String,
    },
    /// A hidden parameter is mentioned in a place narrowing does not rewrite.
    #[error("hidden parameter `{name}` is mentioned by `{keyword}` at {}", at(.pointer))]
    HiddenMentioned {
        /// Where the mention is.
        pointer: String,
        /// The hidden parameter.
        name: String,
        /// The keyword that mentions it.
        keyword: &'static str,
    },
    /// `patternProperties` or `propertyNames` applies to the root arguments object and may
    /// match a hidden parameter.
    #[error(
        "`{keyword}` at {} may apply to hidden parameter `{name}`, and toolward does not evaluate its patterns",
        at(.pointer)
    )]
    HiddenMayMatch {
        /// Where the keyword is.
        pointer: String,
        /// The hidden parameter.
        name: String,
        /// `patternProperties` or `propertyNames`.
        keyword: &'static str,
    },
    /// A reference whose target narrowing changes: the root, or a hidden parameter's
    /// subschema.
    #[error(
        "`{keyword}` `{reference}` at {} refers to {}, which narrowing for hidden parameter `{name}` changes",
        at(.pointer),
        at(.target)
    )]
    RefIntoNarrowed {
        /// The schema object holding the reference.
        pointer: String,
        /// `$ref`, `$dynamicRef` or `$recursiveRef`.
        keyword: &'static str,
        /// The reference as written.
        reference: String,
        /// The JSON Pointer it resolves to.
        target: String,
        /// The hidden parameter.
        name: String,
    },
}

impl SchemaRefusal {
    /// The JSON Pointer (RFC 6901, escaped) of the offending place in the schema; `""` is the
    /// root.
    pub fn pointer(&self) -> &str {
        match self {
            SchemaRefusal::TooDeep { pointer, .. }
            | SchemaRefusal::RootNotObject { pointer, .. }
            | SchemaRefusal::RootTypeNotObject { pointer, .. }
            | SchemaRefusal::UnknownDialect { pointer, .. }
            | SchemaRefusal::Malformed { pointer, .. }
            | SchemaRefusal::NotASchema { pointer }
            | SchemaRefusal::ExternalRef { pointer, .. }
            | SchemaRefusal::RefUnderId { pointer, .. }
            | SchemaRefusal::DanglingRef { pointer, .. }
            | SchemaRefusal::HiddenNotAProperty { pointer, .. }
            | SchemaRefusal::HiddenMentioned { pointer, .. }
            | SchemaRefusal::HiddenMayMatch { pointer, .. }
            | SchemaRefusal::RefIntoNarrowed { pointer, .. } => pointer,
        }
    }
}

/// Renders a pointer for a message: `the root`, or the pointer in backticks.
fn at(pointer: &str) -> String {
    if pointer.is_empty() {
        "the root".to_owned()
    } else {
        format!("`{pointer}`")
    }
}

/// Checks a tool's `inputSchema` (see the module documentation for the rules and their
/// order) and returns its dialect.
///
/// # Errors
///
/// A [`SchemaRefusal`] for the first rule the schema breaks: [`SchemaRefusal::TooDeep`],
/// [`SchemaRefusal::RootNotObject`], [`SchemaRefusal::UnknownDialect`],
/// [`SchemaRefusal::RootTypeNotObject`], [`SchemaRefusal::Malformed`],
/// [`SchemaRefusal::NotASchema`], [`SchemaRefusal::ExternalRef`],
/// [`SchemaRefusal::RefUnderId`] or [`SchemaRefusal::DanglingRef`].
pub fn check_input_schema(schema: &Value) -> Result<Dialect, SchemaRefusal> {
    check(schema).map(|index| index.dialect)
}

/// Checks a tool's `outputSchema` with the same rules as [`check_input_schema`] (dialect,
/// root `type` `object` as MCP requires of `outputSchema`, shape, references, depth) and
/// returns its dialect. Nothing is narrowed.
///
/// # Errors
///
/// As [`check_input_schema`].
pub fn check_output_schema(schema: &Value) -> Result<Dialect, SchemaRefusal> {
    check(schema).map(|index| index.dialect)
}

/// The names of the root `properties` (a tool's parameters), in canonical key order; empty
/// when the schema is not an object or has no `properties` object.
pub fn parameter_names(schema: &Value) -> Vec<&str> {
    match schema {
        Value::Object(root) => match member(root, "properties") {
            Some(Value::Object(properties)) => {
                properties.iter().map(|(name, _)| name.as_str()).collect()
            }
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// The schema the model sees: `schema` with each hidden (denied or fixed) parameter removed
/// from the root `properties` and `required` (JSON Schema keywords `properties`,
/// `required`); a `required` left empty is dropped. The schema is first checked as by
/// [`check_input_schema`], and so is the result.
///
/// `hidden` may be empty (the schema is returned checked and unchanged) and may repeat a name.
///
/// # Errors
///
/// Any refusal of [`check_input_schema`]; [`SchemaRefusal::HiddenNotAProperty`],
/// [`SchemaRefusal::HiddenMentioned`], [`SchemaRefusal::HiddenMayMatch`] or
/// [`SchemaRefusal::RefIntoNarrowed`] when the tool cannot be narrowed soundly (see the
/// module documentation). A refused tool is refused whole, never partly rewritten.
pub fn narrow(schema: &Value, hidden: &[&str]) -> Result<Value, SchemaRefusal> {
    let index = check(schema)?;
    let Value::Object(root) = schema else {
        // check() refuses a root that is not an object; this is unreachable.
        return Err(SchemaRefusal::RootNotObject {
            pointer: String::new(),
            found: schema.type_name(),
        });
    };
    if hidden.is_empty() {
        return Ok(schema.clone());
    }
    let properties = match member(root, "properties") {
        Some(Value::Object(properties)) => Some(properties),
        _ => None,
    };
    for name in hidden {
        if member(properties.map_or(&[][..], Vec::as_slice), name).is_none() {
            return Err(SchemaRefusal::HiddenNotAProperty {
                pointer: if properties.is_some() {
                    "/properties".to_owned()
                } else {
                    String::new()
                },
                name: (*name).to_owned(),
            });
        }
    }
    check_mentions(&index, root, hidden)?;

    let mut narrowed = Vec::with_capacity(root.len());
    for (key, value) in root {
        match (key.as_str(), value) {
            ("properties", Value::Object(properties)) => {
                let kept = properties
                    .iter()
                    .filter(|(name, _)| !hidden.contains(&name.as_str()))
                    .cloned()
                    .collect();
                narrowed.push((key.clone(), Value::Object(kept)));
            }
            ("required", Value::Array(required)) => {
                let kept: Vec<Value> = required
                    .iter()
                    .filter(|entry| !matches!(entry, Value::String(name) if hidden.contains(&name.as_str())))
                    .cloned()
                    .collect();
                if !kept.is_empty() {
                    narrowed.push((key.clone(), Value::Array(kept)));
                }
            }
            _ => narrowed.push((key.clone(), value.clone())),
        }
    }
    let narrowed = Value::Object(narrowed);
    // Fail closed if the rewrite broke anything the checks promise (a reference, say).
    check(&narrowed)?;
    Ok(narrowed)
}

/// The JSON Pointers (RFC 6901, escaped, in document order) of each place where two schemas
/// differ, for the load report's diff of a changed schema.
///
/// Objects are compared member by member and arrays element by element; the deepest place
/// that differs is reported: a member or element present on one side only, or a value whose
/// JSON type or scalar value differs. Equal documents give an empty list; two documents that
/// differ at the root (say, a boolean and an object) give `[""]`. The walk uses no recursion,
/// so it is safe on documents of any depth.
pub fn changed_pointers(a: &Value, b: &Value) -> Vec<String> {
    let mut changed = Vec::new();
    let mut stack: Vec<Step<'_>> = vec![Step::Compare(String::new(), a, b)];
    while let Some(step) = stack.pop() {
        let (pointer, a, b) = match step {
            Step::Report(pointer) => {
                changed.push(pointer);
                continue;
            }
            Step::Compare(pointer, a, b) => (pointer, a, b),
        };
        // Each level is collected in document order, then pushed in reverse so that the
        // stack pops it in document order.
        let mut level: Vec<Step<'_>> = Vec::new();
        match (a, b) {
            (Value::Object(left), Value::Object(right)) => {
                let (mut i, mut j) = (0, 0);
                loop {
                    match (left.get(i), right.get(j)) {
                        (Some((lk, lv)), Some((rk, rv))) if lk == rk => {
                            level.push(Step::Compare(child(&pointer, lk), lv, rv));
                            i += 1;
                            j += 1;
                        }
                        (Some((lk, _)), Some((rk, _))) if lk < rk => {
                            level.push(Step::Report(child(&pointer, lk)));
                            i += 1;
                        }
                        (Some((lk, _)), None) => {
                            level.push(Step::Report(child(&pointer, lk)));
                            i += 1;
                        }
                        (_, Some((rk, _))) => {
                            level.push(Step::Report(child(&pointer, rk)));
                            j += 1;
                        }
                        (None, None) => break,
                    }
                }
            }
            (Value::Array(left), Value::Array(right)) => {
                for index in 0..left.len().max(right.len()) {
                    let pointer = child(&pointer, &index.to_string());
                    match (left.get(index), right.get(index)) {
                        (Some(lv), Some(rv)) => level.push(Step::Compare(pointer, lv, rv)),
                        _ => level.push(Step::Report(pointer)),
                    }
                }
            }
            _ if a != b => changed.push(pointer),
            _ => {}
        }
        stack.extend(level.into_iter().rev());
    }
    changed
}

/// One pending place of [`changed_pointers`]: two values to compare, or a place present on
/// one side only, to report.
enum Step<'a> {
    Compare(String, &'a Value, &'a Value),
    Report(String),
}

// ---------------------------------------------------------------------------------------
// The checks

/// What one walk over a checked document found.
#[derive(Debug)]
struct Index<'a> {
    dialect: Dialect,
    /// Every place the document holds a subschema, by JSON Pointer.
    schemas: HashMap<String, &'a Value>,
    /// Anchors of the document resource (not of embedded resources): name to pointer.
    anchors: HashMap<String, String>,
    /// Every reference keyword, in document order.
    refs: Vec<RefSite>,
    /// The pointer of each `$defs` and `definitions` entry.
    definitions: Vec<String>,
}

/// One `$ref`, `$dynamicRef` or `$recursiveRef`.
#[derive(Debug)]
struct RefSite {
    /// The schema object holding the keyword.
    pointer: String,
    keyword: &'static str,
    reference: String,
    /// The nearest enclosing base-changing `$id` and where it is, if any.
    base: Option<(String, String)>,
}

const REF_KEYWORDS: [&str; 3] = ["$ref", "$dynamicRef", "$recursiveRef"];

/// Runs every check of [`check_input_schema`] and returns what the walk found.
fn check(schema: &Value) -> Result<Index<'_>, SchemaRefusal> {
    check_depth(schema)?;
    let Value::Object(root) = schema else {
        return Err(SchemaRefusal::RootNotObject {
            pointer: String::new(),
            found: match schema {
                Value::Bool(_) => "a boolean schema",
                other => other.type_name(),
            },
        });
    };
    let dialect = dialect_of(root, "")?;
    match member(root, "type") {
        Some(Value::String(t)) if t == "object" => {}
        found => {
            return Err(SchemaRefusal::RootTypeNotObject {
                pointer: if found.is_some() {
                    "/type".to_owned()
                } else {
                    String::new()
                },
                found: match found {
                    None => "no `type`".to_owned(),
                    Some(Value::String(t)) => format!("`type` `{t}`"),
                    Some(other) => format!("a `type` that is {}", other.type_name()),
                },
            });
        }
    }
    let mut index = Index {
        dialect,
        schemas: HashMap::new(),
        anchors: HashMap::new(),
        refs: Vec::new(),
        definitions: Vec::new(),
    };
    index.visit(schema, String::new(), None, true)?;
    for site in &index.refs {
        if !site.reference.starts_with('#') {
            return Err(SchemaRefusal::ExternalRef {
                pointer: site.pointer.clone(),
                keyword: site.keyword,
                reference: site.reference.clone(),
            });
        }
        if let Some((id, id_pointer)) = &site.base {
            return Err(SchemaRefusal::RefUnderId {
                pointer: site.pointer.clone(),
                keyword: site.keyword,
                reference: site.reference.clone(),
                id: id.clone(),
                id_pointer: id_pointer.clone(),
            });
        }
        if index.resolve(&site.reference).is_none() {
            return Err(SchemaRefusal::DanglingRef {
                pointer: site.pointer.clone(),
                keyword: site.keyword,
                reference: site.reference.clone(),
            });
        }
    }
    Ok(index)
}

/// Refuses a document nesting past [`MAX_SCHEMA_DEPTH`], without recursion.
fn check_depth(schema: &Value) -> Result<(), SchemaRefusal> {
    // Most documents pass: walk them without building a pointer per value (that was a third
    // of a load's time), and build pointers only to name the place in a refusal.
    if !schema.nests_deeper_than(MAX_SCHEMA_DEPTH) {
        return Ok(());
    }
    let mut stack: Vec<(String, &Value, usize)> = vec![(String::new(), schema, 0)];
    while let Some((pointer, value, depth)) = stack.pop() {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(SchemaRefusal::TooDeep {
                pointer,
                depth,
                limit: MAX_SCHEMA_DEPTH,
            });
        }
        match value {
            Value::Object(members) => {
                for (key, value) in members.iter().rev() {
                    stack.push((child(&pointer, key), value, depth + 1));
                }
            }
            Value::Array(items) => {
                for (i, value) in items.iter().enumerate().rev() {
                    stack.push((child(&pointer, &i.to_string()), value, depth + 1));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The dialect named by `$schema` in `members` (a schema object at `pointer`); the default
/// when there is no `$schema`.
fn dialect_of(members: &[(String, Value)], pointer: &str) -> Result<Dialect, SchemaRefusal> {
    match member(members, "$schema") {
        None => Ok(Dialect::DEFAULT),
        Some(Value::String(uri)) => {
            Dialect::from_uri(uri).ok_or_else(|| SchemaRefusal::UnknownDialect {
                pointer: child(pointer, "$schema"),
                uri: uri.clone(),
            })
        }
        Some(_) => Err(SchemaRefusal::Malformed {
            pointer: child(pointer, "$schema"),
            keyword: "$schema".to_owned(),
            expected: "a string",
        }),
    }
}

impl<'a> Index<'a> {
    /// Walks the subschema at `pointer` and everything below it. `base` is the nearest
    /// enclosing base-changing `$id` (its value and pointer). Recursion is bounded by
    /// [`MAX_SCHEMA_DEPTH`], checked before.
    fn visit(
        &mut self,
        value: &'a Value,
        pointer: String,
        base: Option<(String, String)>,
        is_root: bool,
    ) -> Result<(), SchemaRefusal> {
        let members = match value {
            Value::Bool(_) => {
                self.schemas.insert(pointer, value);
                return Ok(());
            }
            Value::Object(members) => members,
            _ => return Err(SchemaRefusal::NotASchema { pointer }),
        };
        if !is_root {
            dialect_of(members, &pointer)?;
        }
        let mut base = base;
        if let Some(id) = member(members, "$id") {
            let Value::String(id) = id else {
                return Err(malformed(&pointer, "$id", "a string"));
            };
            if let Some(anchor) = id.strip_prefix('#') {
                if self.dialect == Dialect::Draft7 && !anchor.is_empty() && base.is_none() {
                    self.anchors
                        .entry(anchor.to_owned())
                        .or_insert_with(|| pointer.clone());
                }
            } else if !is_root {
                base = Some((id.clone(), pointer.clone()));
            }
        }
        let anchor_keywords: &[&str] = match self.dialect {
            Dialect::Draft7 => &[],
            Dialect::Draft201909 => &["$anchor"],
            Dialect::Draft202012 => &["$anchor", "$dynamicAnchor"],
        };
        for keyword in anchor_keywords {
            if let Some(anchor) = member(members, keyword) {
                let Value::String(anchor) = anchor else {
                    return Err(malformed(&pointer, keyword, "a string"));
                };
                if base.is_none() {
                    self.anchors
                        .entry(anchor.clone())
                        .or_insert_with(|| pointer.clone());
                }
            }
        }
        for keyword in REF_KEYWORDS {
            if let Some(reference) = member(members, keyword) {
                let Value::String(reference) = reference else {
                    return Err(malformed(&pointer, keyword, "a string"));
                };
                self.refs.push(RefSite {
                    pointer: pointer.clone(),
                    keyword,
                    reference: reference.clone(),
                    base: base.clone(),
                });
            }
        }
        for sub in subschemas(members, &pointer)? {
            if sub.keyword == "$defs" || sub.keyword == "definitions" {
                self.definitions.push(sub.pointer.clone());
            }
            self.visit(sub.value, sub.pointer, base.clone(), false)?;
        }
        self.schemas.insert(pointer, value);
        Ok(())
    }

    /// The pointer of the subschema a `#` reference names, if it names one.
    fn resolve(&self, reference: &str) -> Option<String> {
        let fragment = reference.strip_prefix('#')?;
        if fragment.is_empty() {
            return Some(String::new());
        }
        if fragment.starts_with('/') {
            let decoded = percent_decode(fragment)?;
            // Validate the RFC 6901 escapes; a valid pointer is already in escaped form.
            for token in decoded.split('/').skip(1) {
                unescape(token)?;
            }
            return self.schemas.contains_key(&decoded).then_some(decoded);
        }
        self.anchors.get(fragment).cloned()
    }
}

/// A subschema found under a keyword of a schema object.
struct Sub<'a> {
    keyword: &'a str,
    pointer: String,
    value: &'a Value,
}

/// The subschemas directly under the keywords of the schema object `members` at `pointer`:
/// the union of the subschema keywords of draft-07, 2019-09 and 2020-12.
fn subschemas<'a>(
    members: &'a [(String, Value)],
    pointer: &str,
) -> Result<Vec<Sub<'a>>, SchemaRefusal> {
    let mut found = Vec::new();
    for (keyword, value) in members {
        // Built only under a keyword that holds subschemas: most keywords (`type`,
        // `description`, bounds) hold none, and a pointer for each showed in profiles of a load.
        let at = || child(pointer, keyword);
        match keyword.as_str() {
            "additionalItems"
            | "additionalProperties"
            | "contains"
            | "contentSchema"
            | "else"
            | "if"
            | "not"
            | "propertyNames"
            | "then"
            | "unevaluatedItems"
            | "unevaluatedProperties" => found.push(Sub {
                keyword,
                pointer: at(),
                value,
            }),
            "items" => match value {
                Value::Array(items) => {
                    let at = at();
                    for (i, item) in items.iter().enumerate() {
                        found.push(Sub {
                            keyword,
                            pointer: child(&at, &i.to_string()),
                            value: item,
                        });
                    }
                }
                _ => found.push(Sub {
                    keyword,
                    pointer: at(),
                    value,
                }),
            },
            "allOf" | "anyOf" | "oneOf" | "prefixItems" => {
                let Value::Array(items) = value else {
                    return Err(malformed(pointer, keyword, "an array of schemas"));
                };
                let at = at();
                for (i, item) in items.iter().enumerate() {
                    found.push(Sub {
                        keyword,
                        pointer: child(&at, &i.to_string()),
                        value: item,
                    });
                }
            }
            "$defs" | "definitions" | "dependentSchemas" | "patternProperties" | "properties" => {
                let Value::Object(entries) = value else {
                    return Err(malformed(pointer, keyword, "an object of schemas"));
                };
                let at = at();
                for (name, entry) in entries {
                    found.push(Sub {
                        keyword,
                        pointer: child(&at, name),
                        value: entry,
                    });
                }
            }
            "dependencies" => {
                let Value::Object(entries) = value else {
                    return Err(malformed(pointer, keyword, "an object"));
                };
                let at = at();
                for (name, entry) in entries {
                    // An array lists required names (draft-07's form of `dependentRequired`).
                    if !matches!(entry, Value::Array(_)) {
                        found.push(Sub {
                            keyword,
                            pointer: child(&at, name),
                            value: entry,
                        });
                    }
                }
            }
            _ => {}
        }
    }
    Ok(found)
}

// ---------------------------------------------------------------------------------------
// Narrowing

/// Refuses a schema that could still depend on a hidden name (see the module documentation).
fn check_mentions(
    index: &Index<'_>,
    root: &[(String, Value)],
    hidden: &[&str],
) -> Result<(), SchemaRefusal> {
    // A reference to the root would see the narrowed root; one into a hidden parameter's
    // subschema would dangle.
    for site in &index.refs {
        let Some(target) = index.resolve(&site.reference) else {
            continue;
        };
        for name in hidden {
            let prefix = child("/properties", name);
            let inside = target.is_empty()
                || target == prefix
                || target
                    .strip_prefix(&prefix)
                    .is_some_and(|rest| rest.starts_with('/'));
            if inside {
                return Err(SchemaRefusal::RefIntoNarrowed {
                    pointer: site.pointer.clone(),
                    keyword: site.keyword,
                    reference: site.reference.clone(),
                    target,
                    name: (*name).to_owned(),
                });
            }
        }
    }

    // The root's own dependency keywords.
    structural_mentions(root, "", hidden, false)?;

    // Every subschema that applies to the root arguments object.
    let mut applies: Vec<String> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut queue: Vec<String> = vec![String::new()];
    while let Some(pointer) = queue.pop() {
        if !seen.insert(pointer.clone()) {
            continue;
        }
        let Some(Value::Object(members)) = index.schemas.get(&pointer).copied() else {
            continue;
        };
        for sub in subschemas(members, &pointer)? {
            if matches!(
                sub.keyword,
                "allOf"
                    | "anyOf"
                    | "oneOf"
                    | "not"
                    | "if"
                    | "then"
                    | "else"
                    | "dependentSchemas"
                    | "dependencies"
            ) {
                queue.push(sub.pointer);
            }
        }
        for keyword in REF_KEYWORDS {
            if let Some(Value::String(reference)) = member(members, keyword)
                && let Some(target) = index.resolve(reference)
            {
                queue.push(target);
            }
        }
        applies.push(pointer);
    }
    applies.sort();

    for pointer in &applies {
        let Some(Value::Object(members)) = index.schemas.get(pointer).copied() else {
            continue;
        };
        root_level_mentions(members, pointer, hidden)?;
        if !pointer.is_empty() {
            deep_mentions(members, pointer, hidden)?;
        }
    }

    for pointer in &index.definitions {
        // A definition inside a hidden parameter's subschema goes away with it.
        let removed = hidden.iter().any(|name| {
            pointer
                .strip_prefix(&child("/properties", name))
                .is_some_and(|rest| rest.starts_with('/'))
        });
        if removed {
            continue;
        }
        if let Some(Value::Object(members)) = index.schemas.get(pointer).copied() {
            deep_mentions(members, pointer, hidden)?;
        }
    }
    Ok(())
}

/// Mentions at a subschema that applies to the root arguments object: `patternProperties`,
/// `propertyNames`, and objects in `enum`, `const`, `default` and `examples`.
fn root_level_mentions(
    members: &[(String, Value)],
    pointer: &str,
    hidden: &[&str],
) -> Result<(), SchemaRefusal> {
    let Some(name) = hidden.first() else {
        return Ok(());
    };
    if let Some(Value::Object(patterns)) = member(members, "patternProperties")
        && !patterns.is_empty()
    {
        return Err(SchemaRefusal::HiddenMayMatch {
            pointer: child(pointer, "patternProperties"),
            name: (*name).to_owned(),
            keyword: "patternProperties",
        });
    }
    if let Some(names) = member(members, "propertyNames") {
        let trivial = matches!(names, Value::Bool(true))
            || matches!(names, Value::Object(members) if members.is_empty());
        if !trivial {
            return Err(SchemaRefusal::HiddenMayMatch {
                pointer: child(pointer, "propertyNames"),
                name: (*name).to_owned(),
                keyword: "propertyNames",
            });
        }
    }
    for keyword in ["const", "default", "enum", "examples"] {
        let Some(value) = member(members, keyword) else {
            continue;
        };
        let at = child(pointer, keyword);
        let candidates: Vec<(String, &Value)> = match (keyword, value) {
            ("enum" | "examples", Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| (child(&at, &i.to_string()), item))
                .collect(),
            _ => vec![(at, value)],
        };
        for (at, candidate) in candidates {
            let Value::Object(object) = candidate else {
                continue;
            };
            for name in hidden {
                if member(object, name).is_some() {
                    return Err(SchemaRefusal::HiddenMentioned {
                        pointer: child(&at, name),
                        name: (*name).to_owned(),
                        keyword,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Mentions of a hidden name as a property, required or dependency name anywhere in the
/// subschema `members` at `pointer` (not following references).
fn deep_mentions(
    members: &[(String, Value)],
    pointer: &str,
    hidden: &[&str],
) -> Result<(), SchemaRefusal> {
    structural_mentions(members, pointer, hidden, true)?;
    for sub in subschemas(members, pointer)? {
        if let Value::Object(members) = sub.value {
            deep_mentions(members, &sub.pointer, hidden)?;
        }
    }
    Ok(())
}

/// Mentions of a hidden name in one schema object: keys of `dependentRequired`,
/// `dependentSchemas` and `dependencies` and the names they list, and (when
/// `with_properties`) keys of `properties` and entries of `required`.
fn structural_mentions(
    members: &[(String, Value)],
    pointer: &str,
    hidden: &[&str],
    with_properties: bool,
) -> Result<(), SchemaRefusal> {
    let mention =
        |pointer: String, name: &str, keyword: &'static str| SchemaRefusal::HiddenMentioned {
            pointer,
            name: name.to_owned(),
            keyword,
        };
    for name in hidden {
        if with_properties {
            if let Some(Value::Object(properties)) = member(members, "properties")
                && member(properties, name).is_some()
            {
                return Err(mention(
                    child(&child(pointer, "properties"), name),
                    name,
                    "properties",
                ));
            }
            if let Some(Value::Array(required)) = member(members, "required")
                && let Some(i) = position(required, name)
            {
                return Err(mention(
                    child(&child(pointer, "required"), &i.to_string()),
                    name,
                    "required",
                ));
            }
        }
        for keyword in ["dependentRequired", "dependentSchemas", "dependencies"] {
            let Some(Value::Object(entries)) = member(members, keyword) else {
                continue;
            };
            let at = child(pointer, keyword);
            for (key, entry) in entries {
                if key == name {
                    return Err(mention(child(&at, key), name, keyword));
                }
                if let Value::Array(listed) = entry
                    && let Some(i) = position(listed, name)
                {
                    return Err(mention(
                        child(&child(&at, key), &i.to_string()),
                        name,
                        keyword,
                    ));
                }
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Small helpers

/// The value of `key` in an object's members.
fn member<'a>(members: &'a [(String, Value)], key: &str) -> Option<&'a Value> {
    members.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// The index of the string `name` in an array.
fn position(items: &[Value], name: &str) -> Option<usize> {
    items
        .iter()
        .position(|item| matches!(item, Value::String(s) if s == name))
}

/// `pointer` extended by one reference token, escaped per RFC 6901.
fn child(pointer: &str, token: &str) -> String {
    let mut out = String::with_capacity(pointer.len() + 1 + token.len());
    out.push_str(pointer);
    out.push('/');
    push_pointer_token(&mut out, token);
    out
}

/// An RFC 6901 reference token unescaped, or `None` when it holds a `~` not followed by `0`
/// or `1`.
fn unescape(token: &str) -> Option<String> {
    let mut out = String::with_capacity(token.len());
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => return None,
            }
        } else {
            out.push(c);
        }
    }
    Some(out)
}

/// A URI fragment with its `%XX` escapes decoded (RFC 3986), or `None` when an escape is
/// malformed or the result is not UTF-8.
fn percent_decode(fragment: &str) -> Option<String> {
    let bytes = fragment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&byte) = bytes.get(i) {
        if byte == b'%' {
            let high = hex_digit(*bytes.get(i + 1)?)?;
            let low = hex_digit(*bytes.get(i + 2)?)?;
            out.push(high << 4 | low);
            i += 3;
        } else {
            out.push(byte);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The value of one ASCII hexadecimal digit.
fn hex_digit(byte: u8) -> Option<u8> {
    char::from(byte)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

/// A [`SchemaRefusal::Malformed`] for `keyword` of the schema object at `pointer`.
fn malformed(pointer: &str, keyword: &str, expected: &'static str) -> SchemaRefusal {
    SchemaRefusal::Malformed {
        pointer: child(pointer, keyword),
        keyword: keyword.to_owned(),
        expected,
    }
}

#[cfg(test)]
#[path = "schema/tests.rs"]
mod tests;
