//! `results.review`: what the settings say the tool returns, and what the reviews find in
//! its blocks, found by the very code the default component runs
//! (`Reviewer::review_result`).

use toolward_policy_table::{LABELS_REVIEW, ResultRules};
use toolward_result_review::{Block, Reviewer};

use crate::exports::toolward::policy0_3_0::policy::Call;
use crate::exports::toolward::policy0_3_0::results::ToolResult;
use crate::toolward::policy0_3_0::types::{BlockKind, Labels, ResultAction, ReviewAnswer, Span};

/// A review that withholds the result for `reason`.
pub fn withhold(reason: String) -> ReviewAnswer {
    ReviewAnswer {
        action: ResultAction::Withhold(reason),
        labels: Labels {
            untrusted: false,
            confidentiality: String::new(),
            tags: Vec::new(),
        },
        determined_by: Vec::new(),
    }
}

/// The review of `returned`, a result of `call`.
pub fn review(
    results: &ResultRules,
    reviewer: &Reviewer,
    call: &Call,
    returned: &ToolResult,
) -> ReviewAnswer {
    let blocks: Vec<Block<'_>> = returned
        .blocks
        .iter()
        .map(|block| Block {
            text: &block.text,
            // JSON text: its strings' control characters are escaped.
            json: matches!(
                block.kind,
                BlockKind::Structured | BlockKind::ResourceLink | BlockKind::Other
            ),
            uri: &block.uri,
            mime_type: block.mime_type.as_deref().unwrap_or_default(),
        })
        .collect();
    let found = reviewer.review_result(&blocks, &results.highest_level());
    let returns = results
        .returns(&call.server, &call.tool)
        .cloned()
        .unwrap_or_default();
    let mut determined_by = Vec::new();
    if !returns.is_empty() {
        determined_by.push(LABELS_REVIEW.to_owned());
    }
    determined_by.extend(found.determined_by);
    let mut spans = Vec::with_capacity(found.findings.len());
    for found in found.findings {
        spans.push(Span {
            block: u32::try_from(found.block).unwrap_or(u32::MAX),
            start: u32::try_from(found.finding.start).unwrap_or(u32::MAX),
            end: u32::try_from(found.finding.end).unwrap_or(u32::MAX),
            kind: found.finding.kind,
        });
    }
    let action = match found.withhold {
        Some(reason) => ResultAction::Withhold(reason),
        None if spans.is_empty() => ResultAction::Pass,
        None => ResultAction::Redact(spans),
    };
    ReviewAnswer {
        action,
        labels: Labels {
            untrusted: returns.untrusted,
            confidentiality: found
                .confidentiality
                .or(returns.confidentiality)
                .unwrap_or_default(),
            tags: returns.tags,
        },
        determined_by,
    }
}
