//! How deep a client's file nests, measured without recursion, before anything that recurses
//! reads it: `jsonc-parser` recurses once per array or object, and so do the walkers over what
//! it and `toml_edit` return (and dropping what they return), so a file nested a few hundred
//! thousand levels deep would overflow the stack and abort the process.

/// The deepest nesting of arrays and objects (tables) in `text`, read as JSONC the way
/// `jsonc-parser` reads it: brackets inside strings (`"…"` and `'…'`, with `\` escaping the
/// next character) and comments (`// …` to the end of the line, `/* … */`) do not count. One
/// pass over the bytes, no recursion; text that does not parse is measured all the same (the
/// parser then stops at the fault, no deeper than the brackets before it).
pub(super) fn json_depth(text: &str) -> usize {
    let mut depth = 0usize;
    let mut deepest = 0usize;
    let mut bytes = text.bytes().peekable();
    while let Some(byte) = bytes.next() {
        match byte {
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b'"' | b'\'' => {
                while let Some(inner) = bytes.next() {
                    if inner == b'\\' {
                        bytes.next();
                    } else if inner == byte {
                        break;
                    }
                }
            }
            b'/' => match bytes.peek() {
                Some(b'/') => {
                    for inner in bytes.by_ref() {
                        if inner == b'\n' {
                            break;
                        }
                    }
                }
                Some(b'*') => {
                    bytes.next();
                    let mut star = false;
                    for inner in bytes.by_ref() {
                        if star && inner == b'/' {
                            break;
                        }
                        star = inner == b'*';
                    }
                }
                _ => {}
            },
            _ => {}
        }
    }
    deepest
}

/// One node of a TOML document, for [`toml_depth`].
enum Node<'d> {
    Item(&'d toml_edit::Item),
    Value(&'d toml_edit::Value),
}

/// The deepest nesting of tables, arrays and inline tables in `doc` (its top-level table is
/// depth 1, as the top-level object of a JSON file is), walked with a stack of its own.
/// `toml_edit` bounds each dotted key and each run of nested brackets to 80 levels, but
/// together (a dotted key in each of 80 nested inline tables) they nest far deeper, and the
/// walk that turns the file into JSON recurses.
pub(super) fn toml_depth(doc: &toml_edit::DocumentMut) -> usize {
    let mut deepest = 1usize;
    let mut stack: Vec<(Node<'_>, usize)> = doc
        .as_table()
        .iter()
        .map(|(_, item)| (Node::Item(item), 2))
        .collect();
    while let Some((node, depth)) = stack.pop() {
        match node {
            Node::Item(toml_edit::Item::Table(table)) => {
                deepest = deepest.max(depth);
                stack.extend(table.iter().map(|(_, item)| (Node::Item(item), depth + 1)));
            }
            Node::Item(toml_edit::Item::ArrayOfTables(tables)) => {
                deepest = deepest.max(depth + 1);
                for table in tables.iter() {
                    stack.extend(table.iter().map(|(_, item)| (Node::Item(item), depth + 2)));
                }
            }
            Node::Item(toml_edit::Item::Value(value)) => stack.push((Node::Value(value), depth)),
            Node::Item(toml_edit::Item::None) => {}
            Node::Value(toml_edit::Value::Array(items)) => {
                deepest = deepest.max(depth);
                stack.extend(items.iter().map(|item| (Node::Value(item), depth + 1)));
            }
            Node::Value(toml_edit::Value::InlineTable(table)) => {
                deepest = deepest.max(depth);
                stack.extend(table.iter().map(|(_, item)| (Node::Value(item), depth + 1)));
            }
            Node::Value(_) => {}
        }
    }
    deepest
}

#[cfg(test)]
mod tests {
    use super::{json_depth, toml_depth};

    #[test]
    fn json_depth_counts_arrays_and_objects_and_nothing_in_strings_or_comments() {
        assert_eq!(json_depth(""), 0);
        assert_eq!(json_depth("1"), 0);
        assert_eq!(json_depth("{}"), 1);
        assert_eq!(json_depth(r#"{"a": [1, {"b": []}], "c": {}}"#), 4);
        assert_eq!(json_depth(r#"{"a": "[[[[{{{{", 'b': '{{{\'{{'}"#), 1);
        assert_eq!(json_depth(r#"{"a": "\"[[[[", "b": "\\"}"#), 1);
        assert_eq!(json_depth("{ // [[[[\n \"a\": /* {{{{ */ [] }"), 2);
        assert_eq!(json_depth("{ /*/ [[[[ */ }"), 1);
        assert_eq!(json_depth("{ // [[[[\r\n [[ ]] }"), 3);
    }

    #[test]
    fn json_depth_is_measured_without_recursion_however_deep_the_text() {
        let text = "[".repeat(1_000_000);
        assert_eq!(json_depth(&text), 1_000_000);
    }

    #[test]
    fn toml_depth_counts_tables_dotted_keys_arrays_and_inline_tables() {
        let depth = |text: &str| toml_depth(&text.parse().unwrap());
        assert_eq!(depth(""), 1);
        assert_eq!(depth("a = 1"), 1);
        assert_eq!(
            depth("[mcp_servers.fs]\ncommand = \"x\"\nargs = [\"a\"]"),
            4
        );
        assert_eq!(depth("a.b.c = 1"), 3);
        assert_eq!(depth("a = { b = [[{ c = 1 }]] }"), 5);
        assert_eq!(depth("[[a]]\nb = 1"), 3);
    }

    #[test]
    fn the_deepest_toml_the_parser_takes_is_measured_and_dropped_on_a_small_stack() {
        // Dotted keys of 70 segments in 70 nested inline tables: about 4,900 levels.
        let key = vec!["k"; 70].join(".");
        let text = format!(
            "a = {}1{}",
            format!("{{ {key} = ").repeat(70),
            " }".repeat(70)
        );
        let measured = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || toml_depth(&text.parse().unwrap()))
            .unwrap()
            .join()
            .unwrap();
        assert!(measured > 4_000, "{measured}");
    }
}
