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
}

impl AnsweredBy {
    /// Nobody answered through `channel` (a timeout, a failure to ask).
    pub fn nobody(channel: Channel) -> AnsweredBy {
        AnsweredBy {
            channel,
            answerer: None,
            uid: None,
        }
    }

    /// The operating-system user `user`, through `channel`.
    pub fn os_user(channel: Channel, user: &OsUser) -> AnsweredBy {
        AnsweredBy {
            channel,
            answerer: Some(user.name.clone()),
            uid: Some(user.uid),
        }
    }

    /// The user of the web console signed in with the token named `user`.
    pub fn console_user(user: &str) -> AnsweredBy {
        AnsweredBy {
            channel: Channel::Console,
            answerer: Some(user.to_owned()),
            uid: None,
        }
    }

    /// The person at the client of `principal`, through MCP elicitation.
    pub fn principal(principal: &str) -> AnsweredBy {
        AnsweredBy {
            channel: Channel::Elicitation,
            answerer: Some(principal.to_owned()),
            uid: None,
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
    let from_passwd = std::fs::File::open("/etc/passwd").ok().and_then(|file| {
        let mut bytes = Vec::new();
        file.take(MAX_PASSWD_BYTES).read_to_end(&mut bytes).ok()?;
        passwd_name(&String::from_utf8_lossy(&bytes), uid)
    });
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
