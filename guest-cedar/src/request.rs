//! A call as a Cedar request (`docs/cedar.md`, "The request"): principal, action, resource
//! with its server, and the context, with JSON arguments (and principal attributes)
//! converted only where Cedar holds them exactly, and the session's labels.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;
use std::sync::OnceLock;

use cedar_policy::{
    Context, Entities, Entity, EntityId, EntityTypeName, EntityUid, RestrictedExpression,
};

use crate::exports::toolward::policy0_3_0::policy::Call;
use crate::json::{self, Json};
use crate::toolward::policy0_3_0::types::Effect;

/// Entity type of the principal.
pub const PRINCIPAL_TYPE: &str = "Toolward::Principal";
/// Entity type of a server (the parent of its tools).
pub const SERVER_TYPE: &str = "Toolward::Server";
/// Entity type of a tool; its id is `server/tool` (server names hold no `/`).
pub const TOOL_TYPE: &str = "Toolward::Tool";
/// Entity type of actions.
pub const ACTION_TYPE: &str = "Toolward::Action";
/// The one action: calling a tool.
pub const CALL_ACTION: &str = "call";

/// Fraction digits Cedar's `decimal` holds.
const DECIMAL_DIGITS: usize = 4;

/// A call's Cedar request with its entities.
pub struct Request {
    pub request: cedar_policy::Request,
    pub entities: Entities,
    /// JSON pointers of the arguments (`/facts/…` of facts, `/principal_attributes/…` of
    /// principal attributes) left out because Cedar cannot hold them exactly.
    pub unrepresentable: Vec<String>,
    /// The paths below `context` (`arguments` or `principal_attributes`, then member names
    /// and indexes) of the values left out, to tell which policies would have read them
    /// ([`crate::reads`]); named in a deny by [`left_out_name`].
    pub left_out: Vec<Vec<String>>,
}

/// The context attribute holding the arguments.
const ARGUMENTS: &str = "arguments";
/// The context attribute holding the principal's attributes.
const PRINCIPAL_ATTRIBUTES: &str = "principal_attributes";

/// `effect` as the rules file spells it.
pub fn effect_name(effect: Effect) -> &'static str {
    match effect {
        Effect::ReadOnly => "read-only",
        Effect::LocalChange => "local-change",
        Effect::RemoteChange => "remote-change",
        Effect::Destructive => "destructive",
    }
}

pub fn uid(type_name: &str, id: &str) -> Result<EntityUid, String> {
    Ok(EntityUid::from_type_name_and_id(
        parsed_type(type_name)?,
        EntityId::new(id),
    ))
}

/// The four entity type names, parsed once: Cedar's parser runs for each `from_str`, and a
/// decision names four entities. Parsed by the warm-up decision inside `configure`, so
/// every decision's fresh instance finds them in the snapshot.
fn parsed_type(type_name: &str) -> Result<EntityTypeName, String> {
    static PARSED: OnceLock<Vec<(&'static str, EntityTypeName)>> = OnceLock::new();
    let parsed = PARSED.get_or_init(|| {
        [PRINCIPAL_TYPE, SERVER_TYPE, TOOL_TYPE, ACTION_TYPE]
            .into_iter()
            .filter_map(|name| EntityTypeName::from_str(name).ok().map(|t| (name, t)))
            .collect()
    });
    match parsed.iter().find(|(name, _)| *name == type_name) {
        Some((_, parsed)) => Ok(parsed.clone()),
        None => EntityTypeName::from_str(type_name)
            .map_err(|e| format!("entity type `{type_name}`: {e}")),
    }
}

/// The id of a tool's entity.
pub fn tool_id(server: &str, tool: &str) -> String {
    format!("{server}/{tool}")
}

impl Request {
    /// The request for `call`, whose session's confidentiality has `rank` among the
    /// settings' levels.
    ///
    /// # Errors
    /// A reason when the arguments are not JSON or Cedar refuses the request.
    pub fn of(call: &Call, rank: usize) -> Result<Request, String> {
        let principal = uid(PRINCIPAL_TYPE, &call.principal)?;
        let action = uid(ACTION_TYPE, CALL_ACTION)?;
        let server = uid(SERVER_TYPE, &call.server)?;
        let resource = uid(TOOL_TYPE, &tool_id(&call.server, &call.tool))?;
        let tool = Entity::new(
            resource.clone(),
            HashMap::from([
                (
                    "server".to_owned(),
                    RestrictedExpression::new_string(call.server.clone()),
                ),
                (
                    "name".to_owned(),
                    RestrictedExpression::new_string(call.tool.clone()),
                ),
                (
                    "effect".to_owned(),
                    RestrictedExpression::new_string(effect_name(call.effect).to_owned()),
                ),
            ]),
            HashSet::from([server.clone()]),
        )
        .map_err(|e| format!("the tool's entity: {e}"))?;
        let entities = Entities::from_entities(
            [
                Entity::new_no_attrs(principal.clone(), HashSet::new()),
                Entity::new_no_attrs(server, HashSet::new()),
                Entity::new_no_attrs(action.clone(), HashSet::new()),
                tool,
            ],
            None,
        )
        .map_err(|e| format!("the call's entities: {e}"))?;

        let arguments = json::parse(&call.arguments)?;
        let mut left_out = Vec::new();
        let arguments = match &arguments {
            Json::Object(_) => to_cedar(&arguments, &mut vec![Step::Key(ARGUMENTS)], &mut left_out),
            _ => None,
        }
        .unwrap_or_else(empty_record);
        let attributes = principal_attributes(call, &mut left_out);
        // An argument's pointer is below `context.arguments` (`/n`), as before attributes
        // were given; an attribute's below the context (`/principal_attributes/groups`).
        let mut unrepresentable: Vec<String> = left_out
            .iter()
            .map(|path| match path.split_first() {
                Some((root, rest)) if root == ARGUMENTS => pointer(rest),
                _ => pointer(path),
            })
            .collect();
        let facts = facts(&call.facts, &mut unrepresentable);
        let rank = i64::try_from(rank).unwrap_or(i64::MAX);
        let mut pairs = vec![
            (ARGUMENTS.to_owned(), arguments),
            (PRINCIPAL_ATTRIBUTES.to_owned(), attributes),
            (
                "arguments_sha256".to_owned(),
                RestrictedExpression::new_string(call.arguments_sha256.clone()),
            ),
            (
                "call_id".to_owned(),
                RestrictedExpression::new_string(call.id.clone()),
            ),
            (
                "session_id".to_owned(),
                RestrictedExpression::new_string(call.session.clone()),
            ),
            ("session".to_owned(), session(call, rank)),
            ("facts".to_owned(), facts),
        ];
        match i64::try_from(call.time_ms) {
            Ok(ms) => pairs.push(("time_ms".to_owned(), RestrictedExpression::new_long(ms))),
            Err(_) => unrepresentable.push("/time_ms".to_owned()),
        }
        pairs.push((
            "unrepresentable".to_owned(),
            RestrictedExpression::new_set(
                unrepresentable
                    .iter()
                    .map(|p| RestrictedExpression::new_string(p.clone())),
            ),
        ));
        let context = Context::from_pairs(pairs).map_err(|e| format!("the call's context: {e}"))?;
        let request = cedar_policy::Request::new(principal, action, resource, context, None)
            .map_err(|e| format!("the call's request: {e}"))?;
        Ok(Request {
            request,
            entities,
            unrepresentable,
            left_out,
        })
    }
}

/// `context.session`: the labels of the call's session, with the rank of its
/// confidentiality so that policies can compare levels.
fn session(call: &Call, rank: i64) -> RestrictedExpression {
    let labels = &call.labels;
    RestrictedExpression::new_record([
        (
            "untrusted".to_owned(),
            RestrictedExpression::new_bool(labels.untrusted),
        ),
        (
            "confidentiality".to_owned(),
            RestrictedExpression::new_string(labels.confidentiality.clone()),
        ),
        (
            "confidentiality_rank".to_owned(),
            RestrictedExpression::new_long(rank),
        ),
        (
            "tags".to_owned(),
            RestrictedExpression::new_set(
                labels
                    .tags
                    .iter()
                    .map(|tag| RestrictedExpression::new_string(tag.clone())),
            ),
        ),
    ])
    // Four distinct keys: the record always builds.
    .unwrap_or_else(|_| empty_record())
}

/// `context.principal_attributes`: a record of the attributes by name, each JSON value
/// converted as arguments are. A value that is not JSON, that Cedar cannot hold exactly, or
/// whose name is given twice is left out, its path added to `left_out`.
fn principal_attributes(call: &Call, left_out: &mut Vec<Vec<String>>) -> RestrictedExpression {
    let mut fields: Vec<(String, RestrictedExpression)> = Vec::new();
    let mut twice: Vec<&str> = Vec::new();
    for (i, attribute) in call.principal_attributes.iter().enumerate() {
        let name = attribute.name.as_str();
        if call.principal_attributes[..i]
            .iter()
            .any(|a| a.name == name)
        {
            continue;
        }
        if call.principal_attributes[i + 1..]
            .iter()
            .any(|a| a.name == name)
        {
            twice.push(name);
            continue;
        }
        let value = match json::parse(&attribute.value) {
            Ok(value) => to_cedar(
                &value,
                &mut vec![Step::Key(PRINCIPAL_ATTRIBUTES), Step::Key(name)],
                left_out,
            ),
            Err(_) => {
                left_out.push(vec![PRINCIPAL_ATTRIBUTES.to_owned(), name.to_owned()]);
                None
            }
        };
        if let Some(value) = value {
            fields.push((name.to_owned(), value));
        }
    }
    for name in twice {
        left_out.push(vec![PRINCIPAL_ATTRIBUTES.to_owned(), name.to_owned()]);
    }
    RestrictedExpression::new_record(fields).unwrap_or_else(|_| empty_record())
}

/// How a deny names a value left out at `path` (a [`Request::left_out`] path).
pub fn left_out_name(path: &[String]) -> String {
    match path.split_first() {
        Some((root, rest)) if root == ARGUMENTS => format!("argument `{}`", pointer(rest)),
        Some((root, rest)) if root == PRINCIPAL_ATTRIBUTES => {
            format!("principal attribute `{}`", pointer(rest))
        }
        _ => format!("`{}`", pointer(path)),
    }
}

fn empty_record() -> RestrictedExpression {
    RestrictedExpression::new_record(Vec::new())
        .unwrap_or_else(|_| RestrictedExpression::new_set([]))
}

/// A JSON pointer token (RFC 6901: `~` as `~0`, `/` as `~1`).
fn pointer_token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// Where a value sits in the arguments: the keys and indexes leading to it, rendered as a
/// JSON pointer only for a value left out (a decision's arguments are mostly representable,
/// and formatting every member's pointer cost more than converting it).
#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// The JSON pointer (RFC 6901) of an argument's path.
pub fn pointer(path: &[String]) -> String {
    path.iter()
        .map(|step| format!("/{}", pointer_token(step)))
        .collect()
}

/// `value` as a Cedar value, or `None` (its pointer added to `unrepresentable`) when Cedar
/// cannot hold it exactly: `null`, an integer outside `i64`, a number with more than four
/// fraction digits or outside `decimal`'s range, a number in exponent form, and an array
/// holding any of these (a set without the element would answer `contains` wrongly).
fn to_cedar<'a>(
    value: &'a Json,
    path: &mut Vec<Step<'a>>,
    left_out: &mut Vec<Vec<String>>,
) -> Option<RestrictedExpression> {
    let converted = match value {
        Json::Null => None,
        Json::Bool(b) => Some(RestrictedExpression::new_bool(*b)),
        Json::String(s) => Some(RestrictedExpression::new_string(s.clone())),
        Json::Number(text) => number(text),
        Json::Array(items) => {
            let mut inner = Vec::new();
            let mut elements = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                path.push(Step::Index(i));
                let element = to_cedar(item, path, &mut inner);
                path.pop();
                match element {
                    Some(e) => elements.push(e),
                    None => break,
                }
            }
            if inner.is_empty() {
                Some(RestrictedExpression::new_set(elements))
            } else {
                None
            }
        }
        Json::Object(members) => {
            let mut fields = Vec::with_capacity(members.len());
            for (name, member) in members {
                path.push(Step::Key(name));
                let field = to_cedar(member, path, left_out);
                path.pop();
                if let Some(e) = field {
                    fields.push((name.clone(), e));
                }
            }
            RestrictedExpression::new_record(fields).ok()
        }
    };
    if converted.is_none() {
        left_out.push(owned(path));
    }
    converted
}

/// A path's steps as member names and indexes.
fn owned(path: &[Step<'_>]) -> Vec<String> {
    path.iter()
        .map(|step| match step {
            Step::Key(name) => (*name).to_owned(),
            Step::Index(i) => i.to_string(),
        })
        .collect()
}

/// A canonical JSON number as a Cedar `Long` or `decimal`, when it is one exactly.
fn number(text: &str) -> Option<RestrictedExpression> {
    if text.contains(['e', 'E']) {
        return None;
    }
    let Some((whole, fraction)) = text.split_once('.') else {
        return text.parse::<i64>().ok().map(RestrictedExpression::new_long);
    };
    if fraction.is_empty() || fraction.len() > DECIMAL_DIGITS {
        return None;
    }
    let negative = whole.starts_with('-');
    let digits = whole.trim_start_matches('-');
    // `decimal` is an i64 count of ten-thousandths: check the range exactly.
    let scaled: i128 = format!("{digits}{fraction:0<DECIMAL_DIGITS$}")
        .parse()
        .ok()?;
    let scaled = if negative { -scaled } else { scaled };
    if i64::try_from(scaled).is_err() {
        return None;
    }
    Some(RestrictedExpression::new_decimal(text))
}

/// A facts tree: each dotted name a path of records, each value a `Long`.
enum Node {
    Leaf(i64),
    Branch(BTreeMap<String, Node>),
}

impl Node {
    fn insert(&mut self, path: &[&str], value: i64) -> bool {
        let Node::Branch(children) = self else {
            return false;
        };
        match path {
            [] => false,
            [last] => {
                if children.contains_key(*last) {
                    return false;
                }
                children.insert((*last).to_owned(), Node::Leaf(value));
                true
            }
            [first, rest @ ..] => children
                .entry((*first).to_owned())
                .or_insert_with(|| Node::Branch(BTreeMap::new()))
                .insert(rest, value),
        }
    }

    fn to_cedar(&self) -> RestrictedExpression {
        match self {
            Node::Leaf(value) => RestrictedExpression::new_long(*value),
            Node::Branch(children) => RestrictedExpression::new_record(
                children.iter().map(|(k, v)| (k.clone(), v.to_cedar())),
            )
            // Keys of a map are unique, so the record always builds.
            .unwrap_or_else(|_| empty_record()),
        }
    }
}

/// `context.facts`: `tool.forwarded.minute` = `3` becomes
/// `context.facts.tool.forwarded.minute == 3`.
fn facts(
    facts: &[crate::toolward::policy0_3_0::types::Fact],
    unrepresentable: &mut Vec<String>,
) -> RestrictedExpression {
    let mut root = Node::Branch(BTreeMap::new());
    for fact in facts {
        let path: Vec<&str> = fact.name.split('.').collect();
        let inserted =
            fact.value.trim().parse::<i64>().ok().is_some_and(|value| {
                !path.iter().any(|p| p.is_empty()) && root.insert(&path, value)
            });
        if !inserted {
            unrepresentable.push(format!("/facts/{}", pointer_token(&fact.name)));
        }
    }
    root.to_cedar()
}
