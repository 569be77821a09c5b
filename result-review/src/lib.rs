//! What a policy must redact in the text of an MCP tool result before a model reads it.
//!
//! A [`Reviewer`] is built once with the [`Review`]s to run (the searches are read in
//! [`Reviewer::new`]), then [`Reviewer::review`] gives, for each text, the [`Finding`]s: byte
//! spans on character boundaries, sorted, not overlapping, each with a kind. The crate is pure
//! Rust with one dependency (the search half of `regex-automata`: the patterns, in the `regex`
//! crate's syntax, are compiled to DFAs ahead of time and checked in; the `regex` crate itself
//! only with the feature `regex-baseline`, for a benchmark): it builds for
//! `wasm32-unknown-unknown` and needs no clock, randomness, file or thread.
//!
//! ```
//! use toolward_result_review::{Finding, Review, Reviewer};
//!
//! let reviewer = Reviewer::new(&[Review::Secrets, Review::HiddenCharacters])?;
//! let text = "token: ghp_0123456789abcdefghijABCDEFGHIJklmnop\u{200b}!";
//! assert_eq!(
//!     reviewer.review(text),
//!     [
//!         Finding { start: 7, end: 47, kind: "secret:github-pat".into() },
//!         Finding { start: 47, end: 50, kind: "hidden:zero-width".into() },
//!     ]
//! );
//! # Ok::<(), String>(())
//! ```
//!
//! # Findings
//!
//! Every finding of every review is collected, sorted by start (the longer first at the same
//! start), and overlapping findings are merged into one that spans them all, whose kind lists
//! their distinct kinds in that order, joined by `,` (`secret:jwt,secret:github-pat+base64`,
//! `hidden:escape-sequence,secret:github-pat`): a policy that acts on one kind must look at
//! each of them. No kind holds a `,` otherwise. Findings that only touch (one ends where the
//! next starts) stay apart. A secret finding starts at an ASCII byte and ends after one (or at
//! the end of the text), a hidden one starts at a character and ends after one, so all
//! boundaries are character boundaries.
//!
//! # A whole result
//!
//! [`Reviewer::review_result`] reviews each block of a tool's result (text, a resource's
//! text, `structuredContent` and resource links as JSON text) and says what the policy
//! component's review answer needs: the findings by block, or why the result is withheld
//! (a finding in a block's URI or MIME type, which cannot be redacted in place); the
//! confidentiality a found secret gives the result (the highest level the caller names);
//! and which reviews found something. In a block of JSON text the hidden-characters
//! review also reads each string with its escapes decoded (in JSON a control character is
//! always escaped, `\u001b`, `\b`): an escaped hidden character or escape sequence is found
//! over the escapes it is written with (`\u001b]8;;https://…\u0007` whole; an unterminated
//! sequence through the end of its string). In a text block an escape is text anyone can see,
//! not a hidden character. Both the default component (its reviewing variant) and
//! the Cedar component answer `results.review` with it.
//!
//! # The secrets review (`secrets`)
//!
//! Kinds `secret:<rule-id>`, or `secret:<rule-id>+base64`, `+percent`, `+json` for an encoded
//! copy. What is detected is exactly the shapes below; there is no entropy measure, no keyword
//! near a value, and no generic "looks random" rule, so a secret of a format not listed (a
//! password, a database URL's credentials, a key of a service not listed) is not found.
//!
//! ## Key and token formats
//!
//! The formats follow the default rule set of gitleaks
//! (<https://github.com/gitleaks/gitleaks>, `config/gitleaks.toml` at commit
//! `420a0f55f4a7a03dfe701ceb1f4f66a7c68b26b4`, MIT licence; see the `NOTICE` file), keeping
//! only the rules whose shape is distinctive by itself (a fixed prefix or infix), expressed
//! anew for the `regex` crate. In the patterns, `\w` is `[0-9A-Za-z_]`; **B** marks a token
//! that must start at a word boundary (at the start of the text, or after what is not an ASCII
//! letter, digit or `_` once decoded: such a byte, a JSON escape of one letter such as `\n` or
//! `\b`, or a JSON escape `\uXXXX` or percent escape `%XX` of anything else); **+class** is
//! the class a finding extends over (below).
//!
//! | rule id | matches | notes |
//! | --- | --- | --- |
//! | `github-pat` | `ghp_[0-9A-Za-z]{36}` | +alnum |
//! | `github-oauth` | `gho_[0-9A-Za-z]{36}` | +alnum |
//! | `github-app-token` | `gh[us]_[0-9A-Za-z]{36}` | +alnum |
//! | `github-refresh-token` | `ghr_[0-9A-Za-z]{36}` | +alnum |
//! | `github-fine-grained-pat` | `github_pat_\w{82}` | +`\w` |
//! | `gitlab-pat-routable` | `glpat-[\w-]{27,300}\.[0-9a-z]{9}` | +`[0-9a-z]`, tried before `gitlab-pat` |
//! | `gitlab-pat` | `glpat-[\w-]{20}` | +`[\w-]` |
//! | `gitlab-ptt` | `glptt-[0-9a-f]{40}` | +`[0-9a-f]` |
//! | `gitlab-rrt` | `GR1348941[\w-]{20}` | +`[\w-]` |
//! | `gitlab-runner-authentication-token` | `glrt-[\w-]{20}` | +`[\w-]` |
//! | `slack-bot-token` | `xoxb-[0-9]{10,13}-[0-9]{10,13}[0-9A-Za-z-]*` | +`[0-9A-Za-z-]` |
//! | `slack-user-token` | `xox[pe](-[0-9]{10,13}){3}-[0-9A-Za-z-]{28,34}` | +`[0-9A-Za-z-]` |
//! | `slack-app-token` | `xapp-[0-9]-[0-9A-Za-z]+-[0-9]+-[0-9A-Za-z]+` | lowercase `xapp` only |
//! | `slack-webhook-url` | `hooks.slack.com/(services\|workflows\|triggers)/[0-9A-Za-z+/]{43,56}`, with `https://` or `http://` right before it | +`[0-9A-Za-z+/]` |
//! | `aws-access-key-id` | `(A3T[0-9A-Z]\|AKIA\|ASIA\|ABIA\|ACCA)[0-9A-Z]{16}` | B, +`[0-9A-Z]`; gitleaks' `aws-access-token`; a key ending in `EXAMPLE` is not found (gitleaks' allowlist) |
//! | `gcp-api-key` | `AIza[\w-]{35}` | B, +`[\w-]`; gitleaks' list of known public keys not kept |
//! | `openai-api-key` | `sk-(proj\|svcacct\|admin)-` 74 or 58 `[\w-]`, `T3BlbkFJ`, 74 or 58 `[\w-]`; or `sk-` 20 alnum `T3BlbkFJ` 20 alnum | B, +`[\w-]` |
//! | `anthropic-api-key` | `sk-ant-(api03\|admin01)-[\w-]{93}AA` | B, +`[\w-]`; **not in the pinned commit**: the shape of gitleaks' later `anthropic-api-key` and `anthropic-admin-api-key` rules |
//! | `stripe-access-token` | `[sr]k_(test\|live\|prod)_[0-9A-Za-z]{10,99}` | B, +alnum |
//! | `npm-access-token` | `npm_[0-9A-Za-z]{36}` | B, +alnum; lowercase `npm_` only |
//! | `pypi-upload-token` | `pypi-AgEIcHlwaS5vcmc[\w-]{50,}` | no upper bound (gitleaks: 1000) |
//! | `rubygems-api-token` | `rubygems_[0-9a-f]{48}` | B, +`[0-9a-f]` |
//! | `sendgrid-api-token` | `SG\.[0-9A-Za-z=_.-]{66}` | B, +`[\w=-]`; uppercase `SG.` only |
//! | `huggingface-access-token` | `hf_[A-Za-z]{34}` | B, +letters |
//! | `digitalocean-pat` | `dop_v1_[0-9a-f]{64}` | B, +`[0-9a-f]` |
//! | `digitalocean-access-token` | `doo_v1_[0-9a-f]{64}` | B, +`[0-9a-f]` |
//! | `digitalocean-refresh-token` | `dor_v1_[0-9A-Fa-f]{64}` | B, +hex; lowercase `dor_v1_` only |
//! | `shopify-access-token` | `shpat_[0-9A-Fa-f]{32}` | +hex |
//! | `shopify-custom-access-token` | `shpca_[0-9A-Fa-f]{32}` | +hex |
//! | `shopify-private-app-access-token` | `shppa_[0-9A-Fa-f]{32}` | +hex |
//! | `shopify-shared-secret` | `shpss_[0-9A-Fa-f]{32}` | +hex |
//! | `age-secret-key` | `AGE-SECRET-KEY-1` and 58 bech32 characters `[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]` | |
//! | `databricks-api-token` | `dapi[0-9a-f]{32}(-[0-9])?` | B |
//! | `vault-service-token` | `hvs\.[\w-]{90,120}` | B, +`[\w-]`; the legacy `s.` form is not kept |
//! | `grafana-service-account-token` | `glsa_[0-9A-Za-z]{32}_[0-9A-Fa-f]{8}` | B, +hex |
//! | `grafana-cloud-api-token` | `glc_[0-9A-Za-z+/]{32,400}={0,2}` | B |
//! | `1password-service-account-token` | `ops_eyJ[0-9A-Za-z+/]{250,}={0,3}` | |
//! | `atlassian-api-token` | `ATATT3[\w=-]{186}` | B, +`[\w=-]`; gitleaks' keyword form (`jira … = <24 chars>`) is not kept |
//! | `private-key` | a private key block, below | |
//! | `jwt` | a JWT, below | |
//!
//! How these differ from gitleaks, beyond the rules left out:
//!
//! - **No look-around.** The `regex` crate has neither look-around nor backreferences.
//!   gitleaks ends many rules with "followed by a quote, white space, `;`, `\n`, `\r` or the
//!   end", and some (`github-pat`) with nothing; here a match is instead **extended** over the
//!   following bytes of the class shown as +class, so a token longer than its pattern is
//!   covered whole rather than cut or missed, and a token followed by `,`, `)` or `&` is found
//!   (gitleaks misses those where it asks for that ending). A rule without +class ends where
//!   its pattern does.
//! - Prefixes are matched with their case as written (gitleaks makes some rules wholly
//!   case-insensitive: `(?i)npm_…`, `(?i)xapp-…`), so `NPM_…` is not found.
//! - No entropy threshold and no stopwords: a matching shape is a finding.
//! - At one position the rules are tried in the table's order; the matches do not overlap one
//!   another (the search goes on after each finding).
//! - The word boundary (**B**) and the `EXAMPLE` allowlist are checked after a match, not by the
//!   search, so that the one pass keeps a fast literal prefilter; the `https://` of a Slack
//!   webhook likewise.
//! - Left out although distinctive enough: `twilio-api-key` (`SK` + 32 hex), whose two-letter
//!   prefix made the one-pass search three times slower on prose.
//!
//! ## Private keys (`private-key`)
//!
//! A line `-----BEGIN <label>PRIVATE KEY-----` or `-----BEGIN <label>PRIVATE KEY BLOCK-----`,
//! `<label>` being up to 100 of `[ +A-Z0-9_-]` (`RSA `, `EC `, `OPENSSH `, `ENCRYPTED `,
//! `PGP `, or none), through the first `-----END` line with the same label and ending. A block
//! with no such end line is found through the end of the text. Letters in any case, and `+`
//! (a form's space) wherever a space may stand; labels compare alike. No minimum length
//! between the lines (gitleaks asks for 64 characters). With one of its characters escaped
//! (`\u0020`, `%20`), a block is found in the text's decoded reading (below).
//!
//! ## JWTs (`jwt`)
//!
//! A header segment starting with `ey` at a word boundary (as **B** above, or after a `-`)
//! with at least 10 base64url characters, `.`, a payload segment,
//! `.`, a signature segment (both possibly empty: a detached or unsecured JWS), and, for a
//! JWE, two more non-empty segments. The header must decode (base64url) to text that starts
//! with `{`, ends with `}`, holds no control character but tab, line feed and carriage return,
//! and has `"alg"` followed by `:`; dotted text that merely looks like base64 is not a JWT.
//!
//! ## Encoded copies
//!
//! One level of decoding; each encoded run is decoded once and its decoding reviewed with the
//! formats, private keys and JWTs above (as bytes: a decoding need not be UTF-8). The finding
//! then covers the **whole run**, with the kind of the first secret its decoding holds and a
//! suffix:
//!
//! - `+base64`: a run of at least 24 characters of `[A-Za-z0-9+/_-]` (both alphabets), with
//!   up to two `=` after it. A run goes on over a line break (`\n`, `\r\n`, or their JSON
//!   escapes) when its line so far is at least 24 characters long and a multiple of 4, as
//!   wrapped base64 is. A run right after a JSON escape `\n`, `\r`, `\t` starts after its
//!   letter. A run is decoded from its first character: base64 glued to other letters
//!   (`keyZ2hw…`) decodes misaligned and is not found.
//! - `+percent` and `+json`: when the text holds a percent escape `%XX`, its percent-decoded
//!   reading (every `%XX` decoded, `+` kept) is reviewed; when it holds a JSON escape
//!   `\uXXXX` or `\/` (not after an escaped backslash), its JSON-decoded reading (every JSON
//!   escape decoded: `\uXXXX` with surrogate pairs joined, `\"`, `\\`, `\/`, `\b`, `\f`, `\n`,
//!   `\r`, `\t`). Each secret of a reading with at least one byte from an escape is a finding
//!   over the bytes of the text it was decoded from (`ghp%5F…`, `ghp\u005F…`,
//!   `https:\/\/hooks.slack.com\/…`, a private key whose begin line has one `\u0020`); a
//!   secret written as it is was found in the text itself.
//!
//! ## Not detected
//!
//! - A secret split across two texts (two results, two content blocks, two pages): each text
//!   is reviewed alone, and neither half matches.
//! - A secret broken by a line break or by spaces. A secret broken by hidden characters
//!   (`ghp_…` U+200B `…`, a token coloured in two halves) is found: each stretch of token
//!   bytes (ASCII letters, digits, `+/=_-.%\~:`) with hidden characters inside is also read
//!   without them, and a secret of that reading is a finding over the whole stretch; but a
//!   private key whose begin line (which has spaces) is broken so is not.
//! - Two levels of encoding (base64 of percent-encoded text, base64 of base64), other
//!   encodings (hex, gzip, quoted-printable, HTML entities), and encrypted or compressed copies.
//! - A secret of a format not in the table, or a format's prefix in another case than the
//!   table's (`NPM_…`, `GHP_…`; the issuers write them as the table does).
//! - A JWT whose header segment has `=` padding or whose header's JSON starts with white
//!   space (no issuer writes either; the header segment must start with `ey`).
//! - The part of a secret past the host's result cap: the host cuts a text at the cap before
//!   the review, and moves the cut back to the start of the token it would fall in, so a
//!   secret's head is not delivered without its tail (BENCHMARKS.md and SECURITY.md say
//!   where the cap stands).

//! # The hidden-characters review (`hidden-characters`)
//!
//! Kinds `hidden:<what>`. One finding per run of consecutive characters of one kind:
//!
//! | kind | characters |
//! | --- | --- |
//! | `hidden:escape-sequence` | a terminal escape sequence, whole (below) |
//! | `hidden:control` | C0 controls U+0000–U+001F but tab, line feed and a carriage return before a line feed (a lone one moves the cursor back over the line); DEL U+007F; C1 controls U+0080–U+009F (an ESC or C1 introducer that starts no sequence) |
//! | `hidden:bidi` | U+061C, U+200E, U+200F, U+202A–U+202E, U+2066–U+2069 |
//! | `hidden:zero-width` | U+00AD (soft hyphen), U+180E, U+200B–U+200D, U+2060–U+2064, U+FEFF |
//! | `hidden:tag` | U+E0000–U+E007F (invisible ASCII: "ASCII smuggling") |
//! | `hidden:variation-selector` | U+FE00–U+FE0F, U+E0100–U+E01EF, only a run of **two or more** (one selector after an emoji or an ideograph is ordinary text; a run of them can carry bytes nobody sees) |
//! | `hidden:invisible` | the rest of the host's hidden set: U+034F, U+115F, U+1160, U+17B4, U+17B5, U+180B–U+180D, U+180F, U+2065, U+206A–U+206F, U+2800, U+3164, U+FFA0, U+FFF0–U+FFFB, U+110BD, U+110CD, U+13430–U+1343F, U+1BCA0–U+1BCA3, U+1D159, U+1D173–U+1D17A, U+E0080–U+E00FF, U+E01F0–U+E0FFF |
//!
//! An escape sequence starts with ESC or a C1 introducer and is one finding (consecutive
//! sequences make one run):
//!
//! - CSI (`ESC [`, U+009B): parameter bytes 0x30–0x3F, intermediate bytes 0x20–0x2F, a final
//!   byte 0x40–0x7E (`ESC [31m`, `ESC [2J`); without a final byte, through the last parameter
//!   or intermediate byte;
//! - OSC (`ESC ]`, U+009D): through BEL, ST (`ESC \`) or U+009C (`ESC ]8;;url BEL`, a
//!   hyperlink's target; `ESC ]0;title BEL`);
//! - DCS, SOS, PM, APC (`ESC P`, `ESC X`, `ESC ^`, `ESC _`; U+0090, U+0098, U+009E, U+009F):
//!   through ST or U+009C;
//! - a string sequence (OSC and the four above) ends right before CAN, SUB or an ESC that
//!   does not start ST; unterminated, it runs **to the end of the text**, all that a terminal
//!   would swallow;
//! - any other `ESC` + intermediate bytes 0x20–0x2F + a final byte 0x30–0x7E (`ESC ( B`,
//!   `ESC 7`, `ESC c`).
//!
//! ## Compared with the host
//!
//! The host's `text::hidden_character` (`host/src/text.rs`, used by `host/src/listing.rs` to
//! refuse tool descriptions) is the reference; every character it names hidden is found here
//! too, but for these differences:
//!
//! - A carriage return before a line feed is layout, like tab and line feed; a lone one is a
//!   control, as the host refuses it.
//! - U+2028 and U+2029 (line and paragraph separators) are not found: layout too.
//! - A single variation selector is not found (the host refuses any but U+FE0E and U+FE0F
//!   right after a visible character): only runs of two or more.
//! - U+200E and U+200F are `bidi` here (the host calls them zero-width); U+00AD and U+180E
//!   are `zero-width` (the host: invisible). Names only.
//! - Escape sequences are found whole, not as their ESC alone, and emoji sequences joined by
//!   U+200D (ZWJ) or flag tag sequences are found like any other, as the host refuses them.

#![deny(missing_docs)]

mod encoded;
mod hidden;
mod search;
mod secrets;
mod simd;
mod unescape;

use std::fmt;
use std::str::FromStr;

/// One span to redact: the UTF-8 byte range `[start, end)` of the text reviewed, both on
/// character boundaries, and what it is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Finding {
    /// The first byte.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// What was found: `secret:<rule-id>` (with `+base64`, `+percent` or `+json` for an
    /// encoded copy) or `hidden:<what>`, as the crate docs list them; for findings merged
    /// because they overlapped, each of their kinds, joined by `,`.
    pub kind: String,
}

/// A review a [`Reviewer`] can run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Review {
    /// Key and token formats, private keys and JWTs, also base64-, percent- or JSON-encoded:
    /// `"secrets"`.
    Secrets,
    /// Control characters and terminal escape sequences, bidirectional controls, zero-width,
    /// tag and invisible characters, runs of variation selectors: `"hidden-characters"`.
    HiddenCharacters,
}

impl Review {
    /// Every review.
    pub const ALL: [Review; 2] = [Review::Secrets, Review::HiddenCharacters];

    /// The review's name: `"secrets"` or `"hidden-characters"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Review::Secrets => "secrets",
            Review::HiddenCharacters => "hidden-characters",
        }
    }
}

impl fmt::Display for Review {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Review {
    type Err = String;

    /// The review named `name` ([`Review::as_str`]).
    fn from_str(name: &str) -> Result<Review, String> {
        Review::ALL
            .into_iter()
            .find(|review| review.as_str() == name)
            .ok_or_else(|| {
                format!(
                    "no review named `{name}` (the reviews are `secrets` and `hidden-characters`)"
                )
            })
    }
}

/// The reviews to run, read once (the searches are read in [`Reviewer::new`]) and then
/// used for many texts.
#[derive(Clone, Debug)]
pub struct Reviewer {
    secrets: Option<(secrets::Secrets, encoded::Escapes)>,
    hidden: bool,
}

/// One block of a tool's result, as [`Reviewer::review_result`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block<'a> {
    /// The block's text; empty for a block that has none (an image, audio, a blob).
    pub text: &'a str,
    /// Whether `text` is JSON (`structuredContent`, a resource link, a block of a type the
    /// host does not know), whose strings hold control characters escaped (`\u001b`).
    pub json: bool,
    /// The URI of a resource or resource link; empty for other blocks.
    pub uri: &'a str,
    /// The MIME type the server gave; empty when it gave none.
    pub mime_type: &'a str,
}

/// A finding in one block of a result.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct BlockFinding {
    /// The block's index among the blocks reviewed.
    pub block: usize,
    /// The span of that block's text, and what it is.
    pub finding: Finding,
}

/// What the reviews found in a whole result ([`Reviewer::review_result`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResultFindings {
    /// The spans to redact, block after block: in each block, the findings of
    /// [`Reviewer::review`] (sorted, not overlapping), then in a JSON block its escaped
    /// hidden characters (`hidden:<what>`, which may overlap the former).
    pub findings: Vec<BlockFinding>,
    /// Why the result must be withheld rather than redacted: a block's URI or MIME type
    /// holds a finding, and neither can be redacted in place. `findings` is then empty.
    pub withhold: Option<String>,
    /// The confidentiality the result takes: the highest level, when a secret was found
    /// in a text.
    pub confidentiality: Option<String>,
    /// The reviews that found something, by name: `secrets`, then `hidden-characters`
    /// (for a withheld result, the review of the finding that withheld it).
    pub determined_by: Vec<String>,
}

impl Reviewer {
    /// A reviewer running the reviews named `names` ([`Review::as_str`]).
    ///
    /// # Errors
    /// A message naming an unknown review; or as [`Reviewer::new`].
    pub fn named<S: AsRef<str>>(names: &[S]) -> Result<Reviewer, String> {
        let reviews = names
            .iter()
            .map(|name| name.as_ref().parse::<Review>())
            .collect::<Result<Vec<_>, _>>()?;
        Reviewer::new(&reviews)
    }

    /// The findings in each of `blocks` (a tool's result, block by block), with what they
    /// make of the result: a finding in a block's URI or MIME type withholds it (the first
    /// such, before any text is reviewed); otherwise a found secret gives it
    /// `highest_level` (the highest confidentiality level of the caller's settings), and
    /// the reviews that found something are named.
    pub fn review_result(&self, blocks: &[Block<'_>], highest_level: &str) -> ResultFindings {
        for (index, block) in blocks.iter().enumerate() {
            for (what, value) in [("URI", block.uri), ("MIME type", block.mime_type)] {
                if let Some(finding) = self.review(value).into_iter().next() {
                    let review = if names(&finding.kind, "secret:") {
                        Review::Secrets
                    } else {
                        Review::HiddenCharacters
                    };
                    return ResultFindings {
                        withhold: Some(format!(
                            "the {what} of block {index} holds what the reviews redact ({})",
                            finding.kind
                        )),
                        determined_by: vec![review.as_str().to_owned()],
                        ..ResultFindings::default()
                    };
                }
            }
        }
        let mut findings = Vec::new();
        let mut unescaped = unescape::Unescaped::default();
        let mut found_secret = false;
        let mut found_hidden = false;
        for (index, block) in blocks.iter().enumerate() {
            if block.text.is_empty() {
                continue;
            }
            let direct = self.review(block.text);
            let decoded = if block.json {
                in_strings(self, block.text, &direct, &mut unescaped)
            } else {
                Vec::new()
            };
            for finding in direct.into_iter().chain(decoded) {
                found_secret |= names(&finding.kind, "secret:");
                found_hidden |= names(&finding.kind, "hidden:");
                findings.push(BlockFinding {
                    block: index,
                    finding,
                });
            }
        }
        let mut determined_by = Vec::new();
        let mut confidentiality = None;
        if found_secret {
            confidentiality = Some(highest_level.to_owned());
            determined_by.push(Review::Secrets.as_str().to_owned());
        }
        if found_hidden {
            determined_by.push(Review::HiddenCharacters.as_str().to_owned());
        }
        ResultFindings {
            findings,
            withhold: None,
            confidentiality,
            determined_by,
        }
    }

    /// A reviewer running `reviews` (in any order; one named twice runs once; none at all
    /// finds nothing). An error only if a search compiled ahead of time does not read, which the
    /// tests rule out.
    pub fn new(reviews: &[Review]) -> Result<Reviewer, String> {
        let secrets = if reviews.contains(&Review::Secrets) {
            Some((secrets::Secrets::new()?, encoded::Escapes::new()?))
        } else {
            None
        };
        Ok(Reviewer {
            secrets,
            hidden: reviews.contains(&Review::HiddenCharacters),
        })
    }

    /// As [`Reviewer::new`], with every search on the `regex` crate (the alternation of its
    /// patterns, a group each) instead of the DFAs compiled ahead of time: the same findings,
    /// by the means the searches had before. For the benchmark that compares the guest's
    /// reviews with the same rules run natively on the `regex` crate; not for a guest.
    ///
    /// # Errors
    /// As [`Reviewer::new`].
    #[cfg(feature = "regex-baseline")]
    pub fn on_regex(reviews: &[Review]) -> Result<Reviewer, String> {
        let secrets = if reviews.contains(&Review::Secrets) {
            Some((secrets::Secrets::on_regex()?, encoded::Escapes::on_regex()?))
        } else {
            None
        };
        Ok(Reviewer {
            secrets,
            hidden: reviews.contains(&Review::HiddenCharacters),
        })
    }

    /// The findings in `text`: sorted by start, not overlapping (overlapping findings are
    /// merged, naming each of their kinds), every boundary a character boundary of `text`.
    pub fn review(&self, text: &str) -> Vec<Finding> {
        let mut findings = Vec::new();
        if let Some((secrets, escapes)) = &self.secrets {
            let bytes = text.as_bytes();
            let candidates = secrets.candidates(bytes);
            let mut hits = Vec::new();
            secrets.scan_with(bytes, &candidates, &mut hits);
            findings.extend(hits.into_iter().map(|hit| Finding {
                start: hit.start,
                end: hit.end,
                kind: ["secret:", hit.rule].concat(),
            }));
            findings.extend(
                encoded::Decoder::new(secrets, escapes)
                    .review(bytes, &candidates)
                    .into_iter()
                    .map(|hit| Finding {
                        start: hit.start,
                        end: hit.end,
                        kind: ["secret:", hit.rule, "+", hit.encoding.suffix()].concat(),
                    }),
            );
        }
        if self.hidden || self.secrets.is_some() {
            let runs = hidden::review(text);
            if let Some((secrets, _)) = &self.secrets
                && !runs.is_empty()
            {
                findings.extend(
                    split_by_hidden(secrets, text.as_bytes(), &runs)
                        .into_iter()
                        .map(|hit| Finding {
                            start: hit.start,
                            end: hit.end,
                            kind: ["secret:", hit.rule].concat(),
                        }),
                );
            }
            if self.hidden {
                findings.extend(runs.into_iter().map(|run| Finding {
                    start: run.start,
                    end: run.end,
                    kind: ["hidden:", run.what.as_str()].concat(),
                }));
            }
        }
        merge(findings)
    }
}

/// Whether `b` may be part of a token around a hidden character: ASCII letters, digits and
/// `+/=_-.%\~:`, the characters keys, tokens and their encodings are made of.
fn token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"+/=_-.%\\~:".contains(&b)
}

/// Secrets broken by hidden characters (`ghp_…` U+200B `…`, a token coloured in two halves):
/// each stretch of token bytes with hidden runs inside is read without them, and each secret
/// of that reading that spans a run is a hit over the whole stretch it was read from.
pub(crate) fn split_by_hidden(
    secrets: &secrets::Secrets,
    bytes: &[u8],
    runs: &[hidden::Run],
) -> Vec<secrets::Hit> {
    let mut found = Vec::new();
    let mut candidates = search::Candidates::default();
    let mut hits = Vec::new();
    let mut reading = unescape::Unescaped::default();
    let mut index = 0;
    while let Some(first) = runs.get(index) {
        // The stretch: token bytes before the first run, then runs and token bytes in turn.
        let floor = index
            .checked_sub(1)
            .and_then(|i| runs.get(i))
            .map_or(0, |run| run.end);
        let mut start = first.start;
        while start > floor && bytes.get(start - 1).copied().is_some_and(token_byte) {
            start -= 1;
        }
        let mut last = index;
        let mut end = first.end;
        loop {
            while bytes.get(end).copied().is_some_and(token_byte) {
                end += 1;
            }
            match runs.get(last + 1) {
                Some(next) if next.start == end => {
                    last += 1;
                    end = next.end;
                }
                _ => break,
            }
        }
        let inside = runs.get(index..=last).unwrap_or_default();
        index = last + 1;
        // Nothing but hidden characters: no secret to read.
        let hidden_bytes: usize = inside.iter().map(|run| run.end - run.start).sum();
        if end - start == hidden_bytes {
            continue;
        }
        reading.without(
            bytes,
            start,
            end,
            inside.iter().map(|run| (run.start, run.end)),
        );
        hits.clear();
        secrets.scan_reusing(&reading.bytes, &mut candidates, &mut hits);
        for hit in &hits {
            if reading.any_escaped(hit.start, hit.end) {
                let (start, end) = reading.original(hit.start, hit.end);
                found.push(secrets::Hit {
                    start,
                    end,
                    rule: hit.rule,
                });
            }
        }
    }
    found
}

/// What the strings of JSON text `text` hold once decoded, beyond what `direct` (the
/// findings of `text` itself) covers: each string with an escape that can change what it
/// reads as (`\uXXXX`, `\\`, `\/`, `\b`, `\f`, `\r`) is decoded and reviewed as the text it is
/// ([`Reviewer::review`]: the string's own escapes, JSON text inside it, hidden characters
/// written as escapes), and each finding is over the bytes of `text` it was decoded from.
fn in_strings(
    reviewer: &Reviewer,
    text: &str,
    direct: &[Finding],
    unescaped: &mut unescape::Unescaped,
) -> Vec<Finding> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    for (start, end) in unescape::json_strings(bytes) {
        let content = bytes.get(start..end).unwrap_or_default();
        let may_change = content.windows(2).any(|pair| {
            pair[0] == b'\\' && matches!(pair[1], b'u' | b'\\' | b'/' | b'b' | b'f' | b'r')
        });
        if !may_change {
            continue;
        }
        unescaped.json(bytes, start, end);
        let Ok(decoded) = std::str::from_utf8(&unescaped.bytes) else {
            continue;
        };
        for finding in reviewer.review(decoded) {
            let (start, end) = unescaped.original(finding.start, finding.end);
            let covered = direct.iter().any(|d| d.start <= start && end <= d.end);
            if !covered {
                found.push(Finding {
                    start,
                    end,
                    kind: finding.kind,
                });
            }
        }
    }
    found
}

/// Whether a finding's kind (one kind, or several joined by `,`) names one of `prefix`
/// (`secret:`, `hidden:`). As `kind.contains(prefix)`, since every kind starts with one of the
/// two and neither is inside another kind, but without a substring search for each finding
/// (the guest's `str::contains` sets up a two-way searcher every time).
fn names(kind: &str, prefix: &str) -> bool {
    let (kind, prefix) = (kind.as_bytes(), prefix.as_bytes());
    kind.starts_with(prefix)
        || kind
            .iter()
            .enumerate()
            .any(|(i, &b)| b == b',' && kind.get(i + 1..).is_some_and(|k| k.starts_with(prefix)))
}

/// `findings` sorted by start (the longer first at one start, then in the order given) with
/// overlapping ones merged: the span of them all, their distinct kinds joined by `,`.
fn merge(mut findings: Vec<Finding>) -> Vec<Finding> {
    findings.sort_by(|a, b| a.start.cmp(&b.start).then(b.end.cmp(&a.end)));
    let mut merged: Vec<Finding> = Vec::with_capacity(findings.len());
    for finding in findings {
        match merged.last_mut() {
            Some(last) if finding.start < last.end => {
                last.end = last.end.max(finding.end);
                if !last.kind.split(',').any(|kind| kind == finding.kind) {
                    last.kind.push(',');
                    last.kind.push_str(&finding.kind);
                }
            }
            _ => merged.push(finding),
        }
    }
    merged
}

#[cfg(test)]
mod tests;
