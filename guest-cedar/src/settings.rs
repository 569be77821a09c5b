//! The component's settings text (`docs/cedar.md`, "Settings"): the operator's `.cedar`
//! policies as they are, or a JSON object holding them under `cedar` beside what the rules
//! file says about results, in its shape: `reviews`, `labels.levels` and, under
//! `servers.SERVER.tools.TOOL`, `returns`. The host builds the object from the `.cedar` file
//! and the rules file when the rules name any of these.

use serde_json::Value;
use toolward_policy_table::ResultRules;

/// The settings, read.
pub struct Settings {
    /// The Cedar policies' text.
    pub cedar: String,
    /// The reviews, the confidentiality levels and each tool's `returns`; none for settings
    /// that are the policies alone.
    pub results: ResultRules,
}

/// The key of the policies' text in settings given as a JSON object.
const CEDAR_KEY: &str = "cedar";

impl Settings {
    /// The settings of `text`. A text whose first character (after white space) is `{` is
    /// the JSON object: Cedar policies never start so (an annotation, `permit`, `forbid` or
    /// a comment does).
    ///
    /// # Errors
    /// A message naming the fault: not JSON, no `cedar` string, or a fault of the rules
    /// file's shape (its path, as the rules file's faults are named).
    pub fn parse(text: &str) -> Result<Settings, String> {
        if !text.trim_start().starts_with('{') {
            return Ok(Settings {
                cedar: text.to_owned(),
                results: ResultRules::default(),
            });
        }
        let root: Value = serde_json::from_str(text)
            .map_err(|e| format!("the Cedar settings are not valid JSON: {e}"))?;
        let Some(cedar) = root.get(CEDAR_KEY).and_then(Value::as_str) else {
            return Err(format!(
                "the Cedar settings have no `{CEDAR_KEY}` string holding the policies"
            ));
        };
        let results = ResultRules::from_value(&root, &[CEDAR_KEY])
            .map_err(|e| format!("the Cedar settings: {e}"))?;
        Ok(Settings {
            cedar: cedar.to_owned(),
            results,
        })
    }
}
