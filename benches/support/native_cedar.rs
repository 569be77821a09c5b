//! The native baseline of the Cedar decisions (issue 34.3): `cedar-policy`, the version and
//! features the built-in component (`guest-cedar/`) is built with, deciding a call as the
//! component does, in the benchmark's own process. Per decision, as in the guest: the call's
//! entities and context built from the call (`guest-cedar/src/request.rs`: principal,
//! server, tool with its attributes, the action; arguments parsed from JSON and converted,
//! the session's labels, the facts as nested records), Cedar's `is_authorized`, and the
//! satisfied policies read into one of the three outcomes (`guest-cedar/src/lib.rs`).
//! Only what the bench's call takes is mapped: arguments Cedar cannot hold exactly (null,
//! fractions) are left out rather than reported.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::str::FromStr;

use cedar_policy::{
    Authorizer, Context, Effect as CedarEffect, Entities, Entity, EntityId, EntityTypeName,
    EntityUid, PolicyId, PolicySet, Request, Response, RestrictedExpression,
};
use toolward::component::{CallView, Decision, Effect};

/// What a satisfied policy does, read once from its effect and annotations.
enum Kind {
    Forbid(String),
    Hold(String),
    Permit,
}

/// Parsed policies, renamed by their `@id` as the component renames them.
pub struct NativeCedar {
    set: PolicySet,
    kinds: HashMap<PolicyId, Kind>,
    types: [EntityTypeName; 4],
}

/// A call's request and entities, built once (for the evaluation-only baseline).
pub struct Prepared {
    request: Request,
    entities: Entities,
}

impl NativeCedar {
    pub fn new(text: &str) -> NativeCedar {
        let parsed = PolicySet::from_str(text).expect("the bench's policies parse");
        let mut set = PolicySet::new();
        let mut kinds = HashMap::new();
        for policy in parsed.policies() {
            let id = PolicyId::new(policy.annotation("id").expect("every policy has an @id"));
            let kind = match (policy.effect(), policy.annotation("hold")) {
                (CedarEffect::Forbid, _) => Kind::Forbid(
                    policy
                        .annotation("reason")
                        .map_or_else(|| id.to_string(), str::to_owned),
                ),
                (CedarEffect::Permit, Some(reason)) => Kind::Hold(reason.to_owned()),
                (CedarEffect::Permit, None) => Kind::Permit,
            };
            kinds.insert(id.clone(), kind);
            set.add(policy.new_id(id)).expect("ids are unique");
        }
        let types = [
            "Toolward::Principal",
            "Toolward::Server",
            "Toolward::Tool",
            "Toolward::Action",
        ]
        .map(|name| EntityTypeName::from_str(name).expect("a type name"));
        NativeCedar { set, kinds, types }
    }

    fn uid(&self, which: usize, id: &str) -> EntityUid {
        EntityUid::from_type_name_and_id(self.types[which].clone(), EntityId::new(id))
    }

    /// The request and entities of `call`, as the component builds them per decision.
    pub fn prepare(&self, call: &CallView) -> Prepared {
        let principal = self.uid(0, &call.principal);
        let server = self.uid(1, &call.server);
        let resource = self.uid(2, &format!("{}/{}", call.server, call.tool));
        let action = self.uid(3, "call");
        let effect = match call.effect {
            Effect::ReadOnly => "read-only",
            Effect::LocalChange => "local-change",
            Effect::RemoteChange => "remote-change",
            Effect::Destructive => "destructive",
        };
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
                    RestrictedExpression::new_string(effect.to_owned()),
                ),
            ]),
            HashSet::from([server.clone()]),
        )
        .expect("the tool's entity");
        let entities = Entities::from_entities(
            [
                Entity::new_no_attrs(principal.clone(), HashSet::new()),
                Entity::new_no_attrs(server, HashSet::new()),
                Entity::new_no_attrs(action.clone(), HashSet::new()),
                tool,
            ],
            None,
        )
        .expect("the call's entities");
        let arguments: serde_json::Value =
            serde_json::from_str(&call.arguments).expect("JSON arguments");
        let arguments = to_cedar(&arguments).unwrap_or_else(empty_record);
        let attributes = RestrictedExpression::new_record(
            call.principal_attributes
                .iter()
                .filter_map(|(name, value)| {
                    let value = serde_json::from_str(value).ok()?;
                    Some((name.clone(), to_cedar(&value)?))
                })
                .collect::<Vec<_>>(),
        )
        .unwrap_or_else(|_| empty_record());
        let labels = &call.labels;
        let session = RestrictedExpression::new_record([
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
                RestrictedExpression::new_long(0),
            ),
            (
                "tags".to_owned(),
                RestrictedExpression::new_set(
                    labels
                        .tags
                        .iter()
                        .map(|t| RestrictedExpression::new_string(t.clone())),
                ),
            ),
        ])
        .expect("the session's record");
        let context = Context::from_pairs([
            ("arguments".to_owned(), arguments),
            ("principal_attributes".to_owned(), attributes),
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
            ("session".to_owned(), session),
            ("facts".to_owned(), facts(&call.facts)),
            (
                "time_ms".to_owned(),
                RestrictedExpression::new_long(call.time_ms as i64),
            ),
            (
                "unrepresentable".to_owned(),
                RestrictedExpression::new_set([]),
            ),
        ])
        .expect("the call's context");
        let request =
            Request::new(principal, action, resource, context, None).expect("the call's request");
        Prepared { request, entities }
    }

    /// Cedar's evaluation alone, of a request built beforehand.
    pub fn evaluate(&self, prepared: &Prepared) -> Response {
        Authorizer::new().is_authorized(&prepared.request, &self.set, &prepared.entities)
    }

    /// The decision on `call`, as the component makes it: request, evaluation, outcome.
    pub fn decide(&self, call: &CallView) -> Decision {
        let prepared = self.prepare(call);
        let response = self.evaluate(&prepared);
        let mut forbid = None;
        let mut hold = None;
        let mut permit = false;
        let satisfied: std::collections::BTreeSet<&PolicyId> =
            response.diagnostics().reason().collect();
        for id in satisfied {
            match self.kinds.get(id) {
                Some(Kind::Forbid(reason)) => {
                    forbid.get_or_insert_with(|| reason.clone());
                }
                Some(Kind::Hold(reason)) => {
                    hold.get_or_insert_with(|| reason.clone());
                }
                Some(Kind::Permit) => permit = true,
                None => {}
            }
        }
        if let Some(reason) = forbid {
            return Decision::Deny(reason);
        }
        if let Some(error) = response.diagnostics().errors().next() {
            return Decision::Deny(error.to_string());
        }
        match (hold, permit) {
            (Some(reason), _) => Decision::Hold(reason),
            (None, true) => Decision::Allow,
            (None, false) => Decision::Deny(format!(
                "no Cedar policy permits calling `{}` on server `{}`",
                call.tool, call.server
            )),
        }
    }
}

fn empty_record() -> RestrictedExpression {
    RestrictedExpression::new_record(Vec::new()).expect("an empty record")
}

/// A JSON value as Cedar holds it (integers as `Long`, arrays as sets, objects as records);
/// `None` for what it cannot hold exactly (null, fractions: none in the bench's call).
fn to_cedar(value: &serde_json::Value) -> Option<RestrictedExpression> {
    use serde_json::Value;
    match value {
        Value::Null => None,
        Value::Bool(b) => Some(RestrictedExpression::new_bool(*b)),
        Value::String(s) => Some(RestrictedExpression::new_string(s.clone())),
        Value::Number(n) => n.as_i64().map(RestrictedExpression::new_long),
        Value::Array(items) => items
            .iter()
            .map(to_cedar)
            .collect::<Option<Vec<_>>>()
            .map(RestrictedExpression::new_set),
        Value::Object(members) => RestrictedExpression::new_record(
            members
                .iter()
                .filter_map(|(name, member)| Some((name.clone(), to_cedar(member)?)))
                .collect::<Vec<_>>(),
        )
        .ok(),
    }
}

/// `context.facts`: dotted names as nested records of `Long`s.
fn facts(facts: &[(String, String)]) -> RestrictedExpression {
    enum Node {
        Leaf(i64),
        Branch(BTreeMap<String, Node>),
    }
    fn insert(children: &mut BTreeMap<String, Node>, path: &[&str], value: i64) {
        match path {
            [] => {}
            [last] => {
                children
                    .entry((*last).to_owned())
                    .or_insert(Node::Leaf(value));
            }
            [first, rest @ ..] => {
                let node = children
                    .entry((*first).to_owned())
                    .or_insert_with(|| Node::Branch(BTreeMap::new()));
                if let Node::Branch(children) = node {
                    insert(children, rest, value);
                }
            }
        }
    }
    fn to_cedar(node: &Node) -> RestrictedExpression {
        match node {
            Node::Leaf(value) => RestrictedExpression::new_long(*value),
            Node::Branch(children) => RestrictedExpression::new_record(
                children.iter().map(|(k, v)| (k.clone(), to_cedar(v))),
            )
            .expect("unique keys"),
        }
    }
    let mut root = BTreeMap::new();
    for (name, value) in facts {
        if let Ok(value) = value.trim().parse::<i64>() {
            let path: Vec<&str> = name.split('.').collect();
            insert(&mut root, &path, value);
        }
    }
    to_cedar(&Node::Branch(root))
}
