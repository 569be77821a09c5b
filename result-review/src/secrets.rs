//! The secrets review on bytes: the key and token formats of [`RULES`], private key blocks and
//! JWTs, all found by one combined search in one pass (see the crate docs for what each rule
//! matches and how it differs from gitleaks).

use crate::search::{self, Anchors, Candidates, Search};

/// Which bytes extend a format rule's match: after the pattern matched, the finding grows over
/// every following byte of this class, so that a token longer than the pattern's fixed length
/// is covered whole rather than cut (gitleaks instead refuses or cuts such a match).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Extend {
    /// Nothing: the pattern's match is the finding.
    Nothing,
    /// `[0-9A-Za-z]`.
    Alnum,
    /// `[0-9A-Za-z-]`.
    AlnumDash,
    /// `[0-9A-Za-z_]`.
    Word,
    /// `[0-9A-Za-z_-]`.
    WordDash,
    /// `[0-9A-Za-z_=-]`.
    WordDashEquals,
    /// `[0-9A-Fa-f]`.
    Hex,
    /// `[0-9a-f]`.
    LowerHex,
    /// `[0-9a-z]`.
    LowerAlnum,
    /// `[0-9A-Z]`.
    UpperAlnum,
    /// `[A-Za-z]`.
    Letters,
    /// `[0-9A-Za-z+/]`.
    Base64,
}

impl Extend {
    /// Whether `b` belongs to the class.
    fn contains(self, b: u8) -> bool {
        match self {
            Extend::Nothing => false,
            Extend::Alnum => b.is_ascii_alphanumeric(),
            Extend::AlnumDash => b.is_ascii_alphanumeric() || b == b'-',
            Extend::Word => b.is_ascii_alphanumeric() || b == b'_',
            Extend::WordDash => b.is_ascii_alphanumeric() || b == b'_' || b == b'-',
            Extend::WordDashEquals => {
                b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'='
            }
            Extend::Hex => b.is_ascii_hexdigit(),
            Extend::LowerHex => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
            Extend::LowerAlnum => b.is_ascii_digit() || b.is_ascii_lowercase(),
            Extend::UpperAlnum => b.is_ascii_digit() || b.is_ascii_uppercase(),
            Extend::Letters => b.is_ascii_alphabetic(),
            Extend::Base64 => b.is_ascii_alphanumeric() || b == b'+' || b == b'/',
        }
    }
}

/// One key or token format.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Rule {
    /// The rule id, the `<rule-id>` of the kind `secret:<rule-id>`.
    pub(crate) id: &'static str,
    /// The id of the gitleaks rule it follows, or `None` for a rule of this crate (the crate
    /// docs name it, which a test checks).
    #[cfg_attr(
        not(test),
        expect(dead_code, reason = "read by the test of the crate docs")
    )]
    pub(crate) gitleaks: Option<&'static str>,
    /// Whether the token must start at a word boundary: the byte before it is not an ASCII
    /// letter, digit or `_` (or there is none), or the token follows a JSON escape `\n`, `\r`
    /// or `\t`.
    pub(crate) boundary: bool,
    /// The token's pattern, in the `regex` crate's syntax without Unicode (`\w` is
    /// `[0-9A-Za-z_]`), starting with a literal prefix, with no assertion: the start condition
    /// is checked after a match (an assertion, or an alternative of `\b` and `\\[nrt]`, would
    /// spoil the one-pass search's literal prefilter). The searches are compiled from the
    /// patterns ahead of time ([`crate::search`]). A rule whose start
    /// condition may fail after a match must be bounded in length (a rejected match is searched
    /// again from its second byte on), and no other rule may match at the same start.
    pub(crate) pattern: &'static str,
    /// Text taken into the finding when it stands right before the match (the first that does):
    /// a prefix the pattern leaves out because, as a literal of its own, it would be a poor
    /// prefilter (`https://` before `hooks.slack.com/…`).
    pub(crate) before: &'static [&'static str],
    /// What extends the match.
    pub(crate) extend: Extend,
}

const fn rule(
    id: &'static str,
    gitleaks: Option<&'static str>,
    boundary: bool,
    pattern: &'static str,
    extend: Extend,
) -> Rule {
    Rule {
        id,
        gitleaks,
        boundary,
        pattern,
        before: &[],
        extend,
    }
}

/// The key and token formats, in the order the combined search tries them at one position
/// (a rule listed first wins over a later one matching at the same start: the routable GitLab
/// token before the plain one).
pub(crate) const RULES: &[Rule] = &[
    rule(
        "github-pat",
        Some("github-pat"),
        false,
        r"ghp_[0-9A-Za-z]{36}",
        Extend::Alnum,
    ),
    rule(
        "github-oauth",
        Some("github-oauth"),
        false,
        r"gho_[0-9A-Za-z]{36}",
        Extend::Alnum,
    ),
    rule(
        "github-app-token",
        Some("github-app-token"),
        false,
        r"gh[us]_[0-9A-Za-z]{36}",
        Extend::Alnum,
    ),
    rule(
        "github-refresh-token",
        Some("github-refresh-token"),
        false,
        r"ghr_[0-9A-Za-z]{36}",
        Extend::Alnum,
    ),
    rule(
        "github-fine-grained-pat",
        Some("github-fine-grained-pat"),
        false,
        r"github_pat_\w{82}",
        Extend::Word,
    ),
    rule(
        "gitlab-pat-routable",
        Some("gitlab-pat-routable"),
        false,
        r"glpat-[0-9A-Za-z_-]{27,300}\.[0-9a-z]{9}",
        Extend::LowerAlnum,
    ),
    rule(
        "gitlab-pat",
        Some("gitlab-pat"),
        false,
        r"glpat-[\w-]{20}",
        Extend::WordDash,
    ),
    rule(
        "gitlab-ptt",
        Some("gitlab-ptt"),
        false,
        r"glptt-[0-9a-f]{40}",
        Extend::LowerHex,
    ),
    rule(
        "gitlab-rrt",
        Some("gitlab-rrt"),
        false,
        r"GR1348941[\w-]{20}",
        Extend::WordDash,
    ),
    rule(
        "gitlab-runner-authentication-token",
        Some("gitlab-runner-authentication-token"),
        false,
        r"glrt-[\w-]{20}",
        Extend::WordDash,
    ),
    rule(
        "slack-bot-token",
        Some("slack-bot-token"),
        false,
        r"xoxb-[0-9]{10,13}-[0-9]{10,13}[0-9A-Za-z-]*",
        Extend::AlnumDash,
    ),
    rule(
        "slack-user-token",
        Some("slack-user-token"),
        false,
        r"xox[pe](?:-[0-9]{10,13}){3}-[0-9A-Za-z-]{28,34}",
        Extend::AlnumDash,
    ),
    rule(
        "slack-app-token",
        Some("slack-app-token"),
        false,
        r"xapp-[0-9]-[0-9A-Za-z]+-[0-9]+-[0-9A-Za-z]+",
        Extend::Alnum,
    ),
    Rule {
        id: "slack-webhook-url",
        gitleaks: Some("slack-webhook-url"),
        boundary: false,
        pattern: r"hooks\.slack\.com/(?:services|workflows|triggers)/[0-9A-Za-z+/]{43,56}",
        before: &["https://", "http://"],
        extend: Extend::Base64,
    },
    rule(
        "aws-access-key-id",
        Some("aws-access-token"),
        true,
        r"(?:A3T[0-9A-Z]|AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}",
        Extend::UpperAlnum,
    ),
    rule(
        "gcp-api-key",
        Some("gcp-api-key"),
        true,
        r"AIza[\w-]{35}",
        Extend::WordDash,
    ),
    rule(
        "openai-api-key",
        Some("openai-api-key"),
        true,
        r"sk-(?:proj|svcacct|admin)-(?:[\w-]{74}|[\w-]{58})T3BlbkFJ(?:[\w-]{74}|[\w-]{58})|sk-[0-9A-Za-z]{20}T3BlbkFJ[0-9A-Za-z]{20}",
        Extend::WordDash,
    ),
    rule(
        "anthropic-api-key",
        None,
        true,
        r"sk-ant-(?:api03|admin01)-[\w-]{93}AA",
        Extend::WordDash,
    ),
    rule(
        "stripe-access-token",
        Some("stripe-access-token"),
        true,
        r"[sr]k_(?:test|live|prod)_[0-9A-Za-z]{10,99}",
        Extend::Alnum,
    ),
    rule(
        "npm-access-token",
        Some("npm-access-token"),
        true,
        r"npm_[0-9A-Za-z]{36}",
        Extend::Alnum,
    ),
    rule(
        "pypi-upload-token",
        Some("pypi-upload-token"),
        false,
        r"pypi-AgEIcHlwaS5vcmc[\w-]{50,}",
        Extend::Nothing,
    ),
    rule(
        "rubygems-api-token",
        Some("rubygems-api-token"),
        true,
        r"rubygems_[0-9a-f]{48}",
        Extend::LowerHex,
    ),
    rule(
        "sendgrid-api-token",
        Some("sendgrid-api-token"),
        true,
        r"SG\.[0-9A-Za-z=_.-]{66}",
        Extend::WordDashEquals,
    ),
    rule(
        "huggingface-access-token",
        Some("huggingface-access-token"),
        true,
        r"hf_[A-Za-z]{34}",
        Extend::Letters,
    ),
    rule(
        "digitalocean-pat",
        Some("digitalocean-pat"),
        true,
        r"dop_v1_[0-9a-f]{64}",
        Extend::LowerHex,
    ),
    rule(
        "digitalocean-access-token",
        Some("digitalocean-access-token"),
        true,
        r"doo_v1_[0-9a-f]{64}",
        Extend::LowerHex,
    ),
    rule(
        "digitalocean-refresh-token",
        Some("digitalocean-refresh-token"),
        true,
        r"dor_v1_[0-9A-Fa-f]{64}",
        Extend::Hex,
    ),
    rule(
        "shopify-access-token",
        Some("shopify-access-token"),
        false,
        r"shpat_[0-9A-Fa-f]{32}",
        Extend::Hex,
    ),
    rule(
        "shopify-custom-access-token",
        Some("shopify-custom-access-token"),
        false,
        r"shpca_[0-9A-Fa-f]{32}",
        Extend::Hex,
    ),
    rule(
        "shopify-private-app-access-token",
        Some("shopify-private-app-access-token"),
        false,
        r"shppa_[0-9A-Fa-f]{32}",
        Extend::Hex,
    ),
    rule(
        "shopify-shared-secret",
        Some("shopify-shared-secret"),
        false,
        r"shpss_[0-9A-Fa-f]{32}",
        Extend::Hex,
    ),
    rule(
        "age-secret-key",
        Some("age-secret-key"),
        false,
        r"AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58}",
        Extend::Nothing,
    ),
    rule(
        "databricks-api-token",
        Some("databricks-api-token"),
        true,
        r"dapi[0-9a-f]{32}(?:-[0-9])?",
        Extend::Nothing,
    ),
    rule(
        "vault-service-token",
        Some("vault-service-token"),
        true,
        r"hvs\.[\w-]{90,120}",
        Extend::WordDash,
    ),
    rule(
        "grafana-service-account-token",
        Some("grafana-service-account-token"),
        true,
        r"glsa_[0-9A-Za-z]{32}_[0-9A-Fa-f]{8}",
        Extend::Hex,
    ),
    rule(
        "grafana-cloud-api-token",
        Some("grafana-cloud-api-token"),
        true,
        r"glc_[0-9A-Za-z+/]{32,400}={0,2}",
        Extend::Nothing,
    ),
    rule(
        "1password-service-account-token",
        Some("1password-service-account-token"),
        false,
        r"ops_eyJ[0-9A-Za-z+/]{250,}={0,3}",
        Extend::Nothing,
    ),
    rule(
        "atlassian-api-token",
        Some("atlassian-api-token"),
        true,
        r"ATATT3[0-9A-Za-z_=-]{186}",
        Extend::WordDashEquals,
    ),
];

/// The rule id of a private key block.
pub(crate) const PRIVATE_KEY: &str = "private-key";
/// The rule id of a JWT.
pub(crate) const JWT: &str = "jwt";

/// The begin line of a private key block (the label is between `-----BEGIN` and `-----`).
const PRIVATE_KEY_BEGIN: &str =
    r"-----(?i:BEGIN[ +A-Z0-9_-]{0,100}PRIVATE[ +]KEY(?:[ +]BLOCK)?)-----";

/// The patterns of the combined search ([`search::FORMATS`]): each rule's, in the order of
/// [`RULES`], then [`PRIVATE_KEY_BEGIN`]. Pattern `n` stands for [`Secrets`]' alternative `n`.
pub(crate) const FORMAT_PATTERNS: [&str; RULES.len() + 1] = {
    let mut patterns = [PRIVATE_KEY_BEGIN; RULES.len() + 1];
    let mut n = 0;
    while n < RULES.len() {
        patterns[n] = RULES[n].pattern;
        n += 1;
    }
    patterns
};

/// An end line of a private key block.
pub(crate) const PRIVATE_KEY_END: &str =
    r"-----(?i:END[ +A-Z0-9_-]{0,100}PRIVATE[ +]KEY(?:[ +]BLOCK)?)-----";
/// Where a JWT may start: the first `ey` of a run of `[0-9A-Za-z_-]` that is followed by a
/// `.`, at least 8 characters after it, through the `.`. Every JWT candidate of that run (the
/// match's start if it is at a boundary ([`at_boundary`]), and each `ey` after a `-`) is then
/// checked by [`HeaderCheck`], and the search goes on after the `.`, so no byte is searched
/// twice.
pub(crate) const JWT_HEADER: &str = r"ey[\w-]{8,}\.";

/// What a pattern of the combined search stands for.
#[derive(Clone, Copy, Debug)]
enum Alternative {
    Format(Rule),
    PrivateKey,
}

/// A secret found in some bytes: `[start, end)` and the rule id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) rule: &'static str,
}

/// The compiled secrets review.
#[derive(Clone, Debug)]
pub(crate) struct Secrets {
    /// Every alternative, each as one pattern, in the order of `alternatives`.
    combined: Search,
    alternatives: Vec<Alternative>,
    private_key_end: Search,
    jwt_header: Search,
    /// The one pass that gives the candidates of the searches of
    /// [`search::ONE_PASS_SEARCHES`], in the guest ([`search::ONE_PASS`]).
    anchors: Option<Anchors>,
}

/// The index of the format search in [`search::ONE_PASS_SEARCHES`].
const FORMATS: usize = 0;
/// The index of the JWT header search in [`search::ONE_PASS_SEARCHES`].
const JWTS: usize = 1;
/// The index of the percent escape search in [`search::ONE_PASS_SEARCHES`].
pub(crate) const PERCENT_ESCAPES: usize = 2;
/// The index of the JSON escape search in [`search::ONE_PASS_SEARCHES`].
pub(crate) const JSON_ESCAPES: usize = 3;

/// The start condition of a rule with a boundary, at `start` (an ASCII letter or digit):
/// the start of `hay`, or what stands before it is not an ASCII letter, digit or `_` once
/// decoded: a byte that is not one, a JSON escape of one letter (`\n`, `\b`…), or a JSON
/// escape `\uXXXX` or percent escape `%XX` of something else (so that `"…\u0020AKIA…"` in JSON
/// text and `?a=%20AKIA…` count).
pub(crate) fn at_boundary(hay: &[u8], start: usize) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let before = hay.get(..start).unwrap_or_default();
    match before.last() {
        None => return true,
        Some(&b) if !word(b) => return true,
        _ => {}
    }
    if let [.., b'\\', b'b' | b'f' | b'n' | b'r' | b't'] = before {
        return true;
    }
    if let Some(escape) = before.len().checked_sub(6).and_then(|at| before.get(at..))
        && let Some(unit) = crate::encoded::json_unit(escape)
    {
        return !u8::try_from(unit).is_ok_and(word);
    }
    // Right after a terminal control sequence's parameters (`ESC [1` before `AKIA…`, whose
    // `A` a terminal would take as the sequence's final byte, and a reader as the key's).
    let params = before
        .iter()
        .rev()
        .take(32)
        .take_while(|&&b| b.is_ascii_digit() || b == b';')
        .count();
    let introducer = &before[..before.len() - params];
    if params > 0
        && (introducer.ends_with(b"\x1b[")
            || introducer.ends_with("\u{9b}".as_bytes())
            || introducer.ends_with(b"\\u001b["))
    {
        return true;
    }
    if let [.., b'%', high, low] = before
        && let (Some(high), Some(low)) = (
            crate::encoded::hex_value(*high),
            crate::encoded::hex_value(*low),
        )
    {
        return !word(high << 4 | low);
    }
    false
}

fn read(compiled: &search::Compiled) -> Result<Search, String> {
    Search::new(compiled).map_err(|e| format!("secrets review: {e}"))
}

impl Secrets {
    /// Reads the compiled searches.
    pub(crate) fn new() -> Result<Secrets, String> {
        let mut alternatives: Vec<Alternative> =
            RULES.iter().copied().map(Alternative::Format).collect();
        alternatives.push(Alternative::PrivateKey);
        let anchors = if search::ONE_PASS {
            let literals = search::ONE_PASS_SEARCHES.map(|compiled| compiled.literals());
            Some(Anchors::new(&literals).map_err(|e| format!("secrets review: {e}"))?)
        } else {
            None
        };
        Ok(Secrets {
            combined: read(&search::FORMATS)?,
            alternatives,
            private_key_end: read(&search::PRIVATE_KEY_END)?,
            jwt_header: read(&search::JWT_HEADER)?,
            anchors,
        })
    }

    /// The same review with every search on the `regex` crate ([`Search::on_regex`]).
    #[cfg(feature = "regex-baseline")]
    pub(crate) fn on_regex() -> Result<Secrets, String> {
        let on_regex = |compiled: &search::Compiled| {
            Search::on_regex(compiled).map_err(|e| format!("secrets review: {e}"))
        };
        let mut alternatives: Vec<Alternative> =
            RULES.iter().copied().map(Alternative::Format).collect();
        alternatives.push(Alternative::PrivateKey);
        Ok(Secrets {
            combined: on_regex(&search::FORMATS)?,
            alternatives,
            private_key_end: on_regex(&search::PRIVATE_KEY_END)?,
            jwt_header: on_regex(&search::JWT_HEADER)?,
            anchors: None,
        })
    }

    /// The candidates of the searches in `hay` (in the guest, from one pass; natively each
    /// search uses its own prefilter).
    pub(crate) fn candidates(&self, hay: &[u8]) -> Candidates {
        Candidates::new(self.anchors.as_ref(), hay)
    }

    /// As [`Secrets::scan_with`], finding the candidates into `candidates` (a buffer reused
    /// from text to text).
    pub(crate) fn scan_reusing(
        &self,
        hay: &[u8],
        candidates: &mut Candidates,
        hits: &mut Vec<Hit>,
    ) {
        candidates.refill(self.anchors.as_ref(), hay);
        self.scan_with(hay, candidates, hits);
    }

    /// Appends to `hits` every secret in `hay`: first the format rules' and private keys' in
    /// order, then the JWTs in order (the two lists may overlap). `candidates` are those of
    /// `hay` ([`Secrets::candidates`]).
    pub(crate) fn scan_with(&self, hay: &[u8], candidates: &Candidates, hits: &mut Vec<Hit>) {
        self.scan_formats(hay, candidates.of(FORMATS), hits);
        self.scan_jwts(hay, candidates.of(JWTS), hits);
    }

    /// The format rules and private key blocks, in one pass of the combined search.
    fn scan_formats(&self, hay: &[u8], candidates: Option<&[usize]>, hits: &mut Vec<Hit>) {
        let mut combined = self.combined.cursor(hay, candidates);
        let mut at = 0;
        // Where the last secret ended: a token right after another is at a boundary (two
        // tokens glued together are both found).
        let mut last_end = None;
        while at < hay.len() {
            let Some(found) = combined.find_at(at) else {
                break;
            };
            let (start, end) = (found.start, found.end);
            let Some(alternative) = self.alternatives.get(found.pattern) else {
                break;
            };
            match *alternative {
                Alternative::Format(rule) => {
                    let token = hay.get(start..end).unwrap_or_default();
                    if (rule.boundary && !at_boundary(hay, start) && last_end != Some(start))
                        // gitleaks' allowlist: AWS's documentation example keys.
                        || (rule.id == "aws-access-key-id" && token.ends_with(b"EXAMPLE"))
                    {
                        at = start + 1;
                        continue;
                    }
                    let before = hay.get(..start).unwrap_or_default();
                    let start = rule
                        .before
                        .iter()
                        .find(|prefix| before.ends_with(prefix.as_bytes()))
                        .map_or(start, |prefix| start - prefix.len());
                    let end = extend(hay, end, rule.extend);
                    hits.push(Hit {
                        start,
                        end,
                        rule: rule.id,
                    });
                    at = end;
                    last_end = Some(end);
                }
                Alternative::PrivateKey => {
                    // The label: what is between `-----BEGIN` and the closing `-----`.
                    let label = hay
                        .get(start + 10..end.saturating_sub(5))
                        .unwrap_or_default();
                    let end = self
                        .private_key_block_end(hay, end, label)
                        .unwrap_or(hay.len());
                    hits.push(Hit {
                        start,
                        end,
                        rule: PRIVATE_KEY,
                    });
                    at = end;
                    last_end = Some(end);
                }
            }
        }
    }

    /// The end of the private key block whose begin line ends at `from` with `label`: right
    /// after the first end line with the same label; `None` if there is none.
    pub(crate) fn private_key_block_end(
        &self,
        hay: &[u8],
        from: usize,
        label: &[u8],
    ) -> Option<usize> {
        let mut private_key_end = self.private_key_end.cursor(hay, None);
        let mut at = from;
        while let Some(found) = private_key_end.find_at(at) {
            let end_label = hay
                .get(found.start + 8..found.end.saturating_sub(5))
                .unwrap_or_default();
            if same_label(end_label, label) {
                return Some(found.end);
            }
            at = found.end;
        }
        None
    }

    /// The JWTs: each candidate run found by [`JWT_HEADER`], checked in linear time.
    fn scan_jwts(&self, hay: &[u8], candidates: Option<&[usize]>, hits: &mut Vec<Hit>) {
        let mut jwt_header = self.jwt_header.cursor(hay, candidates);
        let mut at = 0;
        while at < hay.len() {
            let Some(found) = jwt_header.find_at(at) else {
                break;
            };
            let first = found.start;
            // The `.` after the header.
            let dot = found.end - 1;
            match first_header(hay, first, dot)
                .and_then(|start| jwt_end(hay, dot).map(|end| (start, end)))
            {
                Some((start, end)) => {
                    hits.push(Hit {
                        start,
                        end,
                        rule: JWT,
                    });
                    at = end;
                }
                None => at = found.end,
            }
        }
    }
}

/// The label of the private key begin line at `start` of `hay` (what is between `-----BEGIN`
/// and the closing `-----`).
pub(crate) fn private_key_label(hay: &[u8], start: usize) -> &[u8] {
    let after = hay.get(start + 10..).unwrap_or_default();
    let close = after
        .windows(5)
        .position(|w| w == b"-----")
        .unwrap_or(after.len());
    after.get(..close).unwrap_or_default()
}

/// Whether two private key labels (with `PRIVATE KEY` and what follows) are the same, case
/// and the separator (a space, or `+` as a form encodes one) aside.
fn same_label(a: &[u8], b: &[u8]) -> bool {
    let normal = |b: &u8| match b {
        b'+' => b' ',
        b => b.to_ascii_uppercase(),
    };
    a.len() == b.len() && a.iter().map(normal).eq(b.iter().map(normal))
}

/// `end` moved over every following byte of `class`.
fn extend(hay: &[u8], end: usize, class: Extend) -> usize {
    let rest = hay.get(end..).unwrap_or_default();
    end + rest.iter().take_while(|&&b| class.contains(b)).count()
}

/// Whether `b` is a base64url character, as JWTs use.
fn base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// The end of a JWT whose header ends at `dot` (a `.`): after the payload and the signature
/// (`.payload.signature`, each possibly empty, as in a detached or unsecured JWS), and after two
/// more non-empty segments if they follow (a JWE: `.key.iv.ciphertext.tag`). `None` without the
/// signature's `.`.
fn jwt_end(hay: &[u8], dot: usize) -> Option<usize> {
    let segment_end = |from: usize| {
        from + hay
            .get(from..)
            .unwrap_or_default()
            .iter()
            .take_while(|&&b| base64url(b))
            .count()
    };
    let payload_end = segment_end(dot + 1);
    if hay.get(payload_end) != Some(&b'.') {
        return None;
    }
    let signature_end = segment_end(payload_end + 1);
    // A JWE's ciphertext and tag.
    if hay.get(signature_end) == Some(&b'.') {
        let ciphertext_end = segment_end(signature_end + 1);
        if ciphertext_end > signature_end + 1 && hay.get(ciphertext_end) == Some(&b'.') {
            let tag_end = segment_end(ciphertext_end + 1);
            if tag_end > ciphertext_end + 1 {
                return Some(tag_end);
            }
        }
    }
    Some(signature_end)
}

/// The first JWT candidate in the run `[first, dot)` whose header is a JOSE header: `first`
/// itself if it is at a boundary ([`at_boundary`]) and each `ey` after a `-`, with at least 10
/// characters before `dot`.
///
/// Linear in the run's length: the candidates of one alignment (their position modulo 4) decode
/// to suffixes of one decoding, so each alignment is decoded once ([`HeaderCheck`]) and each
/// candidate is then checked in constant time.
fn first_header(hay: &[u8], first: usize, dot: usize) -> Option<usize> {
    let mut checks: [Option<HeaderCheck>; 4] = [None, None, None, None];
    let candidates = (first..dot.saturating_sub(9)).filter(|&at| {
        let start = if at == first {
            at_boundary(hay, at)
        } else {
            hay.get(at - 1) == Some(&b'-')
        };
        start && hay.get(at..at + 2) == Some(b"ey")
    });
    for at in candidates {
        let check = checks.get_mut(at % 4)?;
        let check =
            check.get_or_insert_with(|| HeaderCheck::new(hay.get(at..dot).unwrap_or_default(), at));
        if check.accepts((at - check.base) / 4 * 3) {
            return Some(at);
        }
    }
    None
}

/// The decoding of a JWT header segment from `base` on, and what tells in constant time whether
/// the decoding of a suffix starting at decoded offset `d` is a JOSE header (as the crate
/// docs define it).
#[derive(Debug)]
struct HeaderCheck {
    base: usize,
    /// The decoding, trimmed, ends with `}`.
    closed: bool,
    /// The last decoded byte that JSON text cannot hold raw (a control character but tab,
    /// line feed and carriage return).
    last_bad: Option<usize>,
    /// The last decoded offset of `"alg"` followed, after optional white space, by `:`.
    last_alg: Option<usize>,
}

impl HeaderCheck {
    fn new(segment: &[u8], base: usize) -> HeaderCheck {
        let decoded = crate::encoded::decode_base64(segment);
        let closed = decoded.trim_ascii_end().ends_with(b"}");
        let last_bad = decoded
            .iter()
            .rposition(|&b| (b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r')) || b == 0x7f);
        let last_alg = (0..decoded.len()).rev().find(|&at| {
            decoded.get(at..).is_some_and(|rest| {
                rest.starts_with(b"\"alg\"")
                    && rest
                        .get(5..)
                        .unwrap_or_default()
                        .trim_ascii_start()
                        .starts_with(b":")
            })
        });
        HeaderCheck {
            base,
            closed,
            last_bad,
            last_alg,
        }
    }

    /// Whether the decoding from offset `d` on is a JOSE header (it starts with `{`, as every
    /// decoding of `ey…` does).
    fn accepts(&self, d: usize) -> bool {
        self.closed
            && self.last_bad.is_none_or(|bad| bad < d)
            && self.last_alg.is_some_and(|alg| alg >= d)
    }
}

/// Whether a JWT's first segment decodes (base64url, padding optional) to a JOSE header: text
/// that starts with `{`, ends with `}` once ASCII white space is trimmed, holds no control
/// character but tab, line feed and carriage return, and has the member name `"alg"` followed,
/// after optional white space, by `:`. Not a full JSON parse. (For the tests: [`first_header`]
/// makes the same check on every candidate of a run at once.)
#[cfg(test)]
pub(crate) fn jose_header(segment: &[u8]) -> bool {
    let decoded = crate::encoded::decode_base64(segment);
    decoded.trim_ascii_start().starts_with(b"{") && HeaderCheck::new(segment, 0).accepts(0)
}

#[cfg(test)]
#[path = "secrets/tests.rs"]
pub(crate) mod tests;
