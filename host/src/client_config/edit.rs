//! Reading and changing the server map of a client's file while keeping every other byte:
//! JSON and JSONC through `jsonc-parser`'s concrete syntax tree, TOML through `toml_edit`.

use std::collections::BTreeMap;
use std::path::Path;

use jsonc_parser::ParseOptions;
use jsonc_parser::cst::{CstInputValue, CstObject, CstRootNode};
use serde_json::{Map, Value};

use super::nesting::{json_depth, toml_depth};
use super::{
    ClientConfigError, ClientServer, ClientSpec, FileFormat, MAX_CLIENT_FILE_DEPTH, TOOLWARD_ENTRY,
};

/// The entry `connect` writes.
#[derive(Debug, Clone)]
pub(super) struct ToolwardEntry {
    pub command: String,
    pub args: Vec<String>,
    /// The values moved out of the replaced servers, by the `${VAR}` name `toolward.json`
    /// gives them.
    pub env: BTreeMap<String, String>,
}

fn parse_error(spec: &ClientSpec, path: &Path, message: impl ToString) -> ClientConfigError {
    ClientConfigError::Parse {
        client: spec.id.to_owned(),
        path: path.to_path_buf(),
        message: message.to_string(),
    }
}

/// Refuses a file nesting `depth` levels, over [`MAX_CLIENT_FILE_DEPTH`].
fn within_depth(spec: &ClientSpec, path: &Path, depth: usize) -> Result<(), ClientConfigError> {
    if depth > MAX_CLIENT_FILE_DEPTH {
        return Err(ClientConfigError::TooDeep {
            client: spec.id.to_owned(),
            path: path.to_path_buf(),
            depth,
            limit: MAX_CLIENT_FILE_DEPTH,
        });
    }
    Ok(())
}

/// JSONC `text`, parsed into a value once its depth is known to be within
/// [`MAX_CLIENT_FILE_DEPTH`].
fn json_value(spec: &ClientSpec, path: &Path, text: &str) -> Result<Value, ClientConfigError> {
    within_depth(spec, path, json_depth(text))?;
    Ok(
        jsonc_parser::parse_to_serde_value(text, &ParseOptions::default())
            .map_err(|e| parse_error(spec, path, e))?
            .unwrap_or(Value::Object(Map::new())),
    )
}

/// The servers of the file's server map.
pub(super) fn servers(
    spec: &ClientSpec,
    path: &Path,
    text: &str,
) -> Result<Vec<ClientServer>, ClientConfigError> {
    let root = match spec.format {
        FileFormat::Json => json_value(spec, path, text)?,
        FileFormat::Toml => table_to_json(toml_doc(spec, path, text)?.as_table()),
    };
    let Value::Object(mut root) = root else {
        return Err(parse_error(spec, path, "the top level is not an object"));
    };
    let map = match root.remove(spec.servers_key) {
        None => return Ok(Vec::new()),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(parse_error(
                spec,
                path,
                format!("`{}` is not an object", spec.servers_key),
            ));
        }
    };
    let mut out = Vec::new();
    for (name, entry) in map {
        let Value::Object(entry) = entry else {
            return Err(parse_error(
                spec,
                path,
                format!("`{}.{name}` is not an object", spec.servers_key),
            ));
        };
        out.push(ClientServer { name, entry });
    }
    Ok(out)
}

/// The text with the `replaced` servers removed and the toolward entry in the place of the
/// first of them.
pub(super) fn connect(
    spec: &ClientSpec,
    path: &Path,
    text: &str,
    replaced: &[String],
    entry: &ToolwardEntry,
) -> Result<String, ClientConfigError> {
    match spec.format {
        FileFormat::Json => {
            let (root, servers) = json_servers(spec, path, text)?;
            let mut at = None;
            for name in replaced {
                if let Some(prop) = servers.get(name) {
                    let index = prop.property_index();
                    at = Some(at.map_or(index, |a: usize| a.min(index)));
                    prop.remove();
                }
            }
            let value = json_entry(spec, entry);
            match servers.get(TOOLWARD_ENTRY) {
                Some(prop) => prop.set_value(value),
                None => {
                    let len = servers.properties().len();
                    servers.insert(at.unwrap_or(len).min(len), TOOLWARD_ENTRY, value);
                }
            }
            Ok(root.to_string())
        }
        FileFormat::Toml => {
            let mut doc = toml_doc(spec, path, text)?;
            let servers = toml_servers(spec, path, &mut doc)?;
            for name in replaced {
                servers.remove(name);
            }
            let mut table = toml_edit::Table::new();
            table.insert("command", toml_edit::value(entry.command.as_str()));
            let args: toml_edit::Array = entry.args.iter().map(String::as_str).collect();
            table.insert("args", toml_edit::value(args));
            if !entry.env.is_empty() {
                let mut env = toml_edit::InlineTable::new();
                for (name, value) in &entry.env {
                    env.insert(name, value.as_str().into());
                }
                table.insert("env", toml_edit::value(env));
            }
            servers.insert(TOOLWARD_ENTRY, toml_edit::Item::Table(table));
            Ok(doc.to_string())
        }
    }
}

/// The text with the toolward entry removed and the servers `names` put back in its place,
/// as `backup` has them (TOML keeps their comments; JSON entries are written afresh).
pub(super) fn disconnect(
    spec: &ClientSpec,
    path: &Path,
    text: &str,
    backup: &str,
    names: &[String],
) -> Result<String, ClientConfigError> {
    match spec.format {
        FileFormat::Json => {
            let put_back: Vec<ClientServer> = servers(spec, path, backup)?
                .into_iter()
                .filter(|s| names.contains(&s.name))
                .collect();
            let (root, servers) = json_servers(spec, path, text)?;
            let mut at = servers.properties().len();
            if let Some(prop) = servers.get(TOOLWARD_ENTRY) {
                at = prop.property_index();
                prop.remove();
            }
            for server in put_back.iter().rev() {
                if servers.get(&server.name).is_none() {
                    let len = servers.properties().len();
                    servers.insert(
                        at.min(len),
                        &server.name,
                        to_input(&Value::Object(server.entry.clone())),
                    );
                }
            }
            Ok(root.to_string())
        }
        FileFormat::Toml => {
            let mut old = toml_doc(spec, path, backup)?;
            let old_servers = toml_servers(spec, path, &mut old)?;
            let mut items = Vec::new();
            for name in names {
                if let Some(item) = old_servers.get(name) {
                    items.push((name.clone(), item.clone()));
                }
            }
            let mut doc = toml_doc(spec, path, text)?;
            let servers = toml_servers(spec, path, &mut doc)?;
            servers.remove(TOOLWARD_ENTRY);
            for (name, item) in items {
                if servers.get(&name).is_none() {
                    servers.insert(&name, item);
                }
            }
            Ok(doc.to_string())
        }
    }
}

pub(super) fn json_servers(
    spec: &ClientSpec,
    path: &Path,
    text: &str,
) -> Result<(CstRootNode, CstObject), ClientConfigError> {
    within_depth(spec, path, json_depth(text))?;
    let root = CstRootNode::parse(text, &ParseOptions::default())
        .map_err(|e| parse_error(spec, path, e))?;
    let top = root
        .object_value()
        .or_else(|| root.value().is_none().then(|| root.object_value_or_set()))
        .ok_or_else(|| parse_error(spec, path, "the top level is not an object"))?;
    let servers = top
        .object_value_or_create(spec.servers_key)
        .ok_or_else(|| {
            parse_error(
                spec,
                path,
                format!("`{}` is not an object", spec.servers_key),
            )
        })?;
    Ok((root, servers))
}

fn json_entry(spec: &ClientSpec, entry: &ToolwardEntry) -> CstInputValue {
    let mut members = Vec::new();
    if spec.stdio_type {
        members.push(("type".to_owned(), CstInputValue::from("stdio")));
    }
    members.push(("command".to_owned(), entry.command.clone().into()));
    members.push((
        "args".to_owned(),
        CstInputValue::Array(entry.args.iter().map(|a| a.clone().into()).collect()),
    ));
    if !entry.env.is_empty() {
        members.push((
            "env".to_owned(),
            CstInputValue::Object(
                entry
                    .env
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone().into()))
                    .collect(),
            ),
        ));
    }
    CstInputValue::Object(members)
}

fn to_input(value: &Value) -> CstInputValue {
    match value {
        Value::Null => CstInputValue::Null,
        Value::Bool(b) => CstInputValue::Bool(*b),
        Value::Number(n) => CstInputValue::Number(n.to_string()),
        Value::String(s) => CstInputValue::String(s.clone()),
        Value::Array(items) => CstInputValue::Array(items.iter().map(to_input).collect()),
        Value::Object(map) => {
            CstInputValue::Object(map.iter().map(|(k, v)| (k.clone(), to_input(v))).collect())
        }
    }
}

fn toml_doc(
    spec: &ClientSpec,
    path: &Path,
    text: &str,
) -> Result<toml_edit::DocumentMut, ClientConfigError> {
    let doc: toml_edit::DocumentMut = text.parse().map_err(|e| parse_error(spec, path, e))?;
    within_depth(spec, path, toml_depth(&doc))?;
    Ok(doc)
}

fn toml_servers<'d>(
    spec: &ClientSpec,
    path: &Path,
    doc: &'d mut toml_edit::DocumentMut,
) -> Result<&'d mut dyn toml_edit::TableLike, ClientConfigError> {
    let item = doc
        .as_table_mut()
        .entry(spec.servers_key)
        .or_insert_with(|| {
            let mut table = toml_edit::Table::new();
            table.set_implicit(true);
            toml_edit::Item::Table(table)
        });
    item.as_table_like_mut()
        .ok_or_else(|| parse_error(spec, path, format!("`{}` is not a table", spec.servers_key)))
}

fn table_to_json(table: &dyn toml_edit::TableLike) -> Value {
    let mut map = Map::new();
    for (key, item) in table.iter() {
        if let Some(value) = item_to_json(item) {
            map.insert(key.to_owned(), value);
        }
    }
    Value::Object(map)
}

fn item_to_json(item: &toml_edit::Item) -> Option<Value> {
    match item {
        toml_edit::Item::None => None,
        toml_edit::Item::Value(value) => Some(value_to_json(value)),
        toml_edit::Item::Table(table) => Some(table_to_json(table)),
        toml_edit::Item::ArrayOfTables(tables) => Some(Value::Array(
            tables.iter().map(|t| table_to_json(t)).collect(),
        )),
    }
}

fn value_to_json(value: &toml_edit::Value) -> Value {
    match value {
        toml_edit::Value::String(s) => Value::String(s.value().clone()),
        toml_edit::Value::Integer(i) => Value::from(*i.value()),
        toml_edit::Value::Float(f) => {
            serde_json::Number::from_f64(*f.value()).map_or(Value::Null, Value::Number)
        }
        toml_edit::Value::Boolean(b) => Value::Bool(*b.value()),
        toml_edit::Value::Datetime(d) => Value::String(d.value().to_string()),
        toml_edit::Value::Array(items) => Value::Array(items.iter().map(value_to_json).collect()),
        toml_edit::Value::InlineTable(table) => table_to_json(table),
    }
}
