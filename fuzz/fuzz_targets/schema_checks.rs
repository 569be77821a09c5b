//! Schema soundness and narrowing on arbitrary JSON documents: no panic; every refusal points
//! at a place that exists in the document; a schema narrowed without refusal no longer has
//! the hidden parameters and passes the checks again, in the same dialect.
#![no_main]

use libfuzzer_sys::fuzz_target;
use toolward_fuzz::canonical::{self, Value};
use toolward_fuzz::schema;

fn assert_points_into(document: &Value, refusal: &schema::SchemaRefusal) {
    let pointer = refusal.pointer();
    assert!(
        document.pointer(pointer).is_some(),
        "refusal `{refusal}` points at `{pointer}`, which is not in `{document}`"
    );
}

fuzz_target!(|data: &[u8]| {
    let Ok(document) = canonical::parse(data) else {
        return;
    };
    let checked = schema::check_input_schema(&document);
    assert_eq!(checked, schema::check_output_schema(&document));
    if let Err(refusal) = &checked {
        assert_points_into(&document, refusal);
    }
    assert_eq!(
        schema::narrow(&document, &[]).map(|narrowed| narrowed == document),
        checked.clone().map(|_| true),
        "narrowing nothing must return the checked schema unchanged"
    );
    assert!(schema::changed_pointers(&document, &document).is_empty());

    let names: Vec<String> = schema::parameter_names(&document)
        .into_iter()
        .take(4)
        .map(str::to_owned)
        .collect();
    let mut choices: Vec<Vec<&str>> = names.iter().map(|n| vec![n.as_str()]).collect();
    choices.push(names.iter().map(String::as_str).collect());
    choices.push(vec!["not-a-parameter"]);
    for hidden in choices.iter().filter(|h| !h.is_empty()) {
        match schema::narrow(&document, hidden) {
            Ok(narrowed) => {
                let dialect = checked
                    .clone()
                    .expect("narrowing succeeded on a refused schema");
                assert_eq!(schema::check_input_schema(&narrowed), Ok(dialect));
                let left = schema::parameter_names(&narrowed);
                assert!(
                    hidden.iter().all(|h| !left.contains(h)),
                    "{hidden:?} left in {narrowed}"
                );
                for pointer in schema::changed_pointers(&document, &narrowed) {
                    assert!(
                        document.pointer(&pointer).is_some()
                            || narrowed.pointer(&pointer).is_some(),
                        "changed pointer `{pointer}` is in neither document"
                    );
                }
            }
            Err(refusal) => assert_points_into(&document, &refusal),
        }
    }
});
