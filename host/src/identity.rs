//! Ground floor: who acts. The principal of a client's connection, the operating-system
//! user running this process, and who answered an approval through which channel (the
//! `answered_by` of an audit record).

use std::fmt;
use std::io::Read as _;

use serde::{Deserialize, Serialize};

use crate::text;

/// The principal of a request: the name of the token it carried, or the configured claim
/// of its OAuth access token. `listen` puts it in the request's extensions; the gateway
/// reads it from there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal(pub String);

/// The attributes of a request's principal: the configured claims of its OAuth access token
/// (`listen.oauth.attribute_claims`), each a name and its value as canonical JSON text;
/// empty for a named token. `listen` puts them in the request's extensions beside
/// [`Principal`]; the gateway hands them to every decision (`principal-attributes` of WIT
/// 0.3.0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PrincipalAttributes(pub Vec<(String, String)>);

/// Most bytes of `/etc/passwd` read to name the operating-system user: 4 MiB.
pub const MAX_PASSWD_BYTES: u64 = 4 * 1024 * 1024;

/// The effective uid of this process.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Through which channel an approval was asked and answered (`channel` of
/// [`AnsweredBy`], kebab-case in the audit record).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Channel {
    /// A terminal of the process that made the call (`toolward call`).
    Terminal,
    /// MCP elicitation, answered by the person at the client of a principal.
    Elicitation,
    /// The state folder's queue, answered with `toolward approvals` by an operating-system
    /// user.
    Queue,
    /// An embedding program's own approver ([`FnApprover`](crate::approval::FnApprover) or its own [`Approver`](crate::approval::Approver)).
    Embedder,
    /// Nobody could be asked ([`DenyAll`](crate::approval::DenyAll)).
    Unavailable,
    /// The web console (`toolward console`), answered by a user signed in with one of the
    /// listener's named tokens: the answerer is the token's name.
    Console,
}

impl Channel {
    /// The channel's name as recorded (`terminal`, `elicitation`, `queue`, `embedder`,
    /// `unavailable`, `console`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Terminal => "terminal",
            Self::Elicitation => "elicitation",
            Self::Queue => "queue",
            Self::Embedder => "embedder",
            Self::Unavailable => "unavailable",
            Self::Console => "console",
        }
    }
}

/// Who answered an approval and how: recorded as `answered_by` in the `approval-answered`
/// audit record.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct AnsweredBy {
    /// The channel the approval went through.
    pub channel: Channel,
    /// Who answered: the operating-system user's name (terminal, queue), the principal of
    /// the client's connection (elicitation), what an embedder calls itself. `None` when
    /// nobody answered (a timeout, a failure to ask).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answerer: Option<String>,
    /// The operating-system user's effective uid (terminal, queue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The identity provider's groups of a console user signed in with OpenID Connect, as
    /// its ID token gave them; empty otherwise. [`Approvers`] rules may name them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

impl AnsweredBy {
    /// Nobody answered through `channel` (a timeout, a failure to ask).
    pub fn nobody(channel: Channel) -> AnsweredBy {
        AnsweredBy {
            channel,
            answerer: None,
            uid: None,
            groups: Vec::new(),
        }
    }

    /// The operating-system user `user`, through `channel`.
    pub fn os_user(channel: Channel, user: &OsUser) -> AnsweredBy {
        AnsweredBy {
            channel,
            answerer: Some(user.name.clone()),
            uid: Some(user.uid),
            groups: Vec::new(),
        }
    }

    /// The user of the web console signed in as `user` (a token's name, or the ID token's
    /// user claim), in the identity provider's `groups` (empty for a token).
    pub fn console_user(user: &str, groups: &[String]) -> AnsweredBy {
        AnsweredBy {
            channel: Channel::Console,
            answerer: Some(user.to_owned()),
            uid: None,
            groups: groups.to_vec(),
        }
    }

    /// The person at the client of `principal`, through MCP elicitation.
    pub fn principal(principal: &str) -> AnsweredBy {
        AnsweredBy {
            channel: Channel::Elicitation,
            answerer: Some(principal.to_owned()),
            uid: None,
            groups: Vec::new(),
        }
    }
}

impl fmt::Display for AnsweredBy {
    /// `queue: user `alice` (uid 1000)`, `elicitation: principal `ci``, `terminal: nobody`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let who = self.answerer.as_deref().map(text::escape);
        match (&who, self.uid, self.channel) {
            (None, _, channel) => write!(f, "{}: nobody", channel.as_str()),
            (Some(name), Some(uid), channel) => {
                write!(f, "{}: user `{name}` (uid {uid})", channel.as_str())
            }
            (Some(name), None, Channel::Elicitation) => {
                write!(f, "elicitation: principal `{name}`")
            }
            (Some(name), None, channel) => write!(f, "{}: `{name}`", channel.as_str()),
        }
    }
}

/// `approvers`: who may answer held calls. With no rules (the default) anyone who reaches a
/// channel answers any call, the single operator's flow. Once rules are named, an answer
/// counts only when a rule names its answerer for the call's server and effect, and never
/// when the answerer made the call, unless `allow_self_approval`.
///
/// Three names meet here. A **principal** (who made a call) is the name of the token it
/// carried, its OAuth access token's principal claim, or on stdio the config's `principal`.
/// A **console user** is the name of the token they signed in with (the same names as the
/// principals: the console user `alice` is the principal `alice`) or the ID token's user
/// claim, with its groups; `users` and `groups` name them, and an answer through
/// elicitation is the principal's own. An **operating-system user** answering with
/// `toolward approvals` is named by the `/etc/passwd` name of the uid that wrote the answer;
/// `os_users` names them, and they answer their own call when that uid is the one the
/// gateway holding it runs as.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Approvers {
    /// Who answers what (`approvers.rules`); empty: everyone answers everything.
    pub rules: Vec<ApproverRule>,
    /// Whether an answerer may answer a call they made (`approvers.allow_self_approval`,
    /// default false): an agent approving its own held call through elicitation, the
    /// terminal or its own token.
    pub allow_self_approval: bool,
}

/// One rule of [`Approvers`]: these answerers answer these servers' calls of these effects.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApproverRule {
    /// Console users and principals by name (`users`).
    pub users: Vec<String>,
    /// The identity provider's groups of console users (`groups`).
    pub groups: Vec<String>,
    /// Operating-system users by name (`os_users`), answering through the queue.
    pub os_users: Vec<String>,
    /// The servers whose calls they answer (`servers`); empty: every server.
    pub servers: Vec<String>,
    /// The effects of the calls they answer (`effects`, `read-only`, `local-change`,
    /// `remote-change`, `destructive`); empty: every effect.
    pub effects: Vec<String>,
}

/// What an answerer is judged against: the held call's server, the effect of its tool, who
/// made it, and the uid of the process holding it (the gateway's).
#[derive(Debug, Clone, Copy)]
pub struct HeldCall<'a> {
    /// The call's server.
    pub server: &'a str,
    /// The effect of the call's tool.
    pub effect: &'a str,
    /// Who made the call.
    pub principal: &'a str,
    /// The effective uid of the process holding the call, when known (not across a fleet's
    /// database).
    pub holder_uid: Option<u32>,
}

impl Approvers {
    /// Whether rules are named (then answers are judged).
    pub fn named(&self) -> bool {
        !self.rules.is_empty()
    }

    /// Whether `by` may answer `call`: `Ok` always without rules; otherwise why not (the
    /// answerer made the call, or no rule names them for the call's server and effect),
    /// escaped for display.
    ///
    /// # Errors
    ///
    /// The reason, naming the answerer, the server and the effect.
    pub fn may_answer(&self, by: &AnsweredBy, call: &HeldCall<'_>) -> Result<(), String> {
        if !self.named() {
            return Ok(());
        }
        let who = by.to_string();
        let Some(name) = answerer_name(by) else {
            return Err(format!(
                "{who} names nobody, and approvers are named (`approvers.rules`)"
            ));
        };
        if !self.allow_self_approval && answers_own(by, call) {
            return Err(format!(
                "{who} made this call, and a principal does not answer its own held calls (`approvers.allow_self_approval` is false)"
            ));
        }
        let covers = |rule: &ApproverRule| {
            (rule.servers.is_empty() || rule.servers.iter().any(|s| s == call.server))
                && (rule.effects.is_empty() || rule.effects.iter().any(|e| e == call.effect))
        };
        if self.rules.iter().any(|rule| names(rule, by, &name) && covers(rule)) {
            Ok(())
        } else {
            Err(format!(
                "{who} is not an approver of the {} calls of server `{}` (`approvers.rules`)",
                text::escape(call.effect),
                text::escape(call.server)
            ))
        }
    }

    /// Whether `by` may accept a changed tool of `server` in the console (what `toolward pin
    /// --tool` does): always without rules; otherwise a rule must name them for that server
    /// (or every server) and every effect, since an accepted tool is called at every effect
    /// its rules give it.
    ///
    /// # Errors
    ///
    /// The reason, naming the answerer and the server.
    pub fn may_accept(&self, by: &AnsweredBy, server: &str) -> Result<(), String> {
        if !self.named() {
            return Ok(());
        }
        let Some(name) = answerer_name(by) else {
            return Err(format!("{by} names nobody, and approvers are named (`approvers.rules`)"));
        };
        let accepts = self.rules.iter().any(|rule| {
            names(rule, by, &name)
                && rule.effects.is_empty()
                && (rule.servers.is_empty() || rule.servers.iter().any(|s| s == server))
        });
        if accepts {
            Ok(())
        } else {
            Err(format!(
                "{by} may not accept the tools of server `{}`: that takes a rule of `approvers.rules` naming them for it with every effect",
                text::escape(server)
            ))
        }
    }

    /// Whether `by` may read what concerns `server` (its held calls and audit records): a
    /// rule names them for that server, or for every server. Always without rules; records
    /// of no server (the load, the policy) need a rule for every server.
    pub fn may_read(&self, by: &AnsweredBy, server: Option<&str>) -> bool {
        if !self.named() {
            return true;
        }
        let Some(name) = answerer_name(by) else {
            return false;
        };
        self.rules.iter().any(|rule| {
            names(rule, by, &name)
                && (rule.servers.is_empty()
                    || server.is_some_and(|server| rule.servers.iter().any(|s| s == server)))
        })
    }
}

/// Whether `rule` names the answerer `by`, judged by `name`: an operating-system user by
/// `os_users`; anyone else by `users` or, for a console user, one of their `groups`.
fn names(rule: &ApproverRule, by: &AnsweredBy, name: &str) -> bool {
    match by.channel {
        Channel::Queue | Channel::Terminal => rule.os_users.iter().any(|u| u == name),
        _ => {
            rule.users.iter().any(|u| u == name)
                || by.groups.iter().any(|g| rule.groups.contains(g))
        }
    }
}

/// The name an answer is judged by: for an operating-system user, the `/etc/passwd` name of
/// the uid (the uid is checked against the answer file's owner; the name it carries is only
/// what the answering process read); otherwise the name it carries.
fn answerer_name(by: &AnsweredBy) -> Option<String> {
    match by.channel {
        Channel::Queue | Channel::Terminal => by.uid.map(os_user_name),
        _ => by.answerer.clone(),
    }
}

/// Whether `by` answers a call they made: through elicitation or the calling terminal
/// always; through the queue when its uid is the holding gateway's; otherwise when its name
/// is the call's principal.
fn answers_own(by: &AnsweredBy, call: &HeldCall<'_>) -> bool {
    match by.channel {
        Channel::Elicitation | Channel::Terminal => true,
        Channel::Queue => by.uid.is_some() && by.uid == call.holder_uid,
        Channel::Console | Channel::Embedder | Channel::Unavailable => {
            by.answerer.as_deref() == Some(call.principal)
        }
    }
}

/// The name `/etc/passwd` gives `uid`, else `uid N`.
pub fn os_user_name(uid: u32) -> String {
    read_passwd()
        .and_then(|passwd| passwd_name(&passwd, uid))
        .unwrap_or_else(|| format!("uid {uid}"))
}

/// `/etc/passwd`, at most [`MAX_PASSWD_BYTES`].
fn read_passwd() -> Option<String> {
    let file = std::fs::File::open("/etc/passwd").ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_PASSWD_BYTES).read_to_end(&mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// An operating-system user: the effective uid of this process and its name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OsUser {
    /// The effective uid.
    pub uid: u32,
    /// The name `/etc/passwd` gives the uid (read at most [`MAX_PASSWD_BYTES`]), else the
    /// `USER` variable, else `uid N`.
    pub name: String,
}

/// The operating-system user this process runs as (see [`OsUser`]).
pub fn current_os_user() -> OsUser {
    let uid = euid();
    let from_passwd = read_passwd().and_then(|passwd| passwd_name(&passwd, uid));
    let name = from_passwd
        .or_else(|| std::env::var("USER").ok().filter(|name| !name.is_empty()))
        .unwrap_or_else(|| format!("uid {uid}"));
    OsUser { uid, name }
}

/// The name of `uid` in the text of a `passwd` file (`name:password:uid:...` lines).
fn passwd_name(passwd: &str, uid: u32) -> Option<String> {
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        let found: u32 = fields.nth(1)?.parse().ok()?;
        (found == uid && !name.is_empty()).then(|| name.to_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules() -> Approvers {
        Approvers {
            rules: vec![
                ApproverRule {
                    users: vec![String::from("alice")],
                    servers: vec![String::from("fs")],
                    effects: vec![String::from("local-change")],
                    ..ApproverRule::default()
                },
                ApproverRule {
                    groups: vec![String::from("oncall")],
                    effects: vec![String::from("destructive")],
                    ..ApproverRule::default()
                },
                ApproverRule {
                    os_users: vec![os_user_name(0)],
                    ..ApproverRule::default()
                },
            ],
            allow_self_approval: false,
        }
    }

    fn call<'a>(server: &'a str, effect: &'a str, principal: &'a str) -> HeldCall<'a> {
        HeldCall {
            server,
            effect,
            principal,
            holder_uid: Some(1000),
        }
    }

    #[test]
    fn without_rules_everyone_answers_everything_even_their_own_calls() {
        let none = Approvers::default();
        assert!(!none.named());
        let by = AnsweredBy::principal("agent");
        assert_eq!(none.may_answer(&by, &call("fs", "destructive", "agent")), Ok(()));
        assert!(none.may_read(&by, None));
    }

    #[test]
    fn a_rule_names_its_answerers_for_its_servers_and_effects_only() {
        let approvers = rules();
        let alice = AnsweredBy::console_user("alice", &[]);
        assert_eq!(approvers.may_answer(&alice, &call("fs", "local-change", "ci")), Ok(()));
        let other_server = approvers
            .may_answer(&alice, &call("git", "local-change", "ci"))
            .unwrap_err();
        assert!(other_server.contains("not an approver of the local-change calls of server `git`"), "{other_server}");
        assert!(approvers.may_answer(&alice, &call("fs", "destructive", "ci")).is_err());
        // A group of the identity provider, not a user of that name.
        let oncall = AnsweredBy::console_user("dave", &[String::from("oncall")]);
        assert_eq!(approvers.may_answer(&oncall, &call("git", "destructive", "ci")), Ok(()));
        let named_oncall = AnsweredBy::console_user("oncall", &[]);
        assert!(approvers.may_answer(&named_oncall, &call("git", "destructive", "ci")).is_err());
        // Console users and operating-system users are named apart.
        let root_by_console = AnsweredBy::console_user(&os_user_name(0), &[]);
        assert!(approvers.may_answer(&root_by_console, &call("fs", "read-only", "ci")).is_err());
        let root = AnsweredBy::os_user(Channel::Queue, &OsUser { uid: 0, name: String::from("claimed") });
        assert_eq!(approvers.may_answer(&root, &call("fs", "read-only", "ci")), Ok(()));
        // An operating-system user is judged by the uid's name, not the name carried.
        let claims_root = AnsweredBy::os_user(Channel::Queue, &OsUser { uid: 4242, name: os_user_name(0) });
        assert!(approvers.may_answer(&claims_root, &call("fs", "read-only", "ci")).is_err());
        // Nobody named: no answer counts.
        assert!(approvers.may_answer(&AnsweredBy::nobody(Channel::Embedder), &call("fs", "read-only", "ci")).is_err());
    }

    #[test]
    fn a_principal_does_not_answer_its_own_call_unless_allowed() {
        let mut approvers = rules();
        approvers.rules.push(ApproverRule {
            users: vec![String::from("ci")],
            ..ApproverRule::default()
        });
        let own = call("fs", "local-change", "ci");
        for by in [
            AnsweredBy::principal("ci"),
            AnsweredBy::console_user("ci", &[]),
        ] {
            let why = approvers.may_answer(&by, &own).unwrap_err();
            assert!(why.contains("made this call"), "{why}");
        }
        // The terminal of the calling process is the caller's, whoever its user is.
        let terminal = AnsweredBy::os_user(Channel::Terminal, &OsUser { uid: 0, name: String::from("root") });
        assert!(approvers.may_answer(&terminal, &own).unwrap_err().contains("made this call"));
        // Through the queue: their own when their uid holds the call.
        let holder = AnsweredBy::os_user(Channel::Queue, &OsUser { uid: 1000, name: String::from("agent") });
        assert!(approvers.may_answer(&holder, &own).unwrap_err().contains("made this call"));
        approvers.allow_self_approval = true;
        assert_eq!(approvers.may_answer(&AnsweredBy::console_user("ci", &[]), &own), Ok(()));
        assert_eq!(approvers.may_answer(&AnsweredBy::principal("ci"), &own), Ok(()));
        // Allowed to answer their own, still only where a rule names them.
        assert!(approvers.may_answer(&holder, &own).unwrap_err().contains("not an approver"));
    }

    #[test]
    fn accepting_a_changed_tool_takes_a_rule_for_its_server_at_every_effect() {
        let approvers = rules();
        // Alice answers only fs's local changes: accepting a tool is more than that.
        let alice = AnsweredBy::console_user("alice", &[]);
        assert!(approvers.may_accept(&alice, "fs").unwrap_err().contains("may not accept"));
        let mut wider = approvers.clone();
        wider.rules.push(ApproverRule {
            users: vec![String::from("alice")],
            servers: vec![String::from("fs")],
            ..ApproverRule::default()
        });
        assert_eq!(wider.may_accept(&alice, "fs"), Ok(()));
        assert!(wider.may_accept(&alice, "git").is_err());
        assert_eq!(Approvers::default().may_accept(&alice, "git"), Ok(()));
    }

    #[test]
    fn a_user_reads_the_servers_a_rule_names_them_for() {
        let approvers = rules();
        let alice = AnsweredBy::console_user("alice", &[]);
        assert!(approvers.may_read(&alice, Some("fs")));
        assert!(!approvers.may_read(&alice, Some("git")));
        assert!(!approvers.may_read(&alice, None));
        let oncall = AnsweredBy::console_user("dave", &[String::from("oncall")]);
        assert!(approvers.may_read(&oncall, Some("git")) && approvers.may_read(&oncall, None));
        assert!(!approvers.may_read(&AnsweredBy::console_user("mallory", &[]), Some("fs")));
    }

    #[test]
    fn the_passwd_file_names_the_uid() {
        let passwd =
            "root:x:0:0:root:/root:/bin/sh\nbroken\nalice:x:1000:1000::/home/alice:/bin/sh\n";
        assert_eq!(passwd_name(passwd, 1000).as_deref(), Some("alice"));
        assert_eq!(passwd_name(passwd, 0).as_deref(), Some("root"));
        assert_eq!(passwd_name(passwd, 7), None);
        let me = current_os_user();
        assert_eq!(me.uid, euid());
        assert!(!me.name.is_empty());
    }
}
