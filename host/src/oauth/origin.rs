//! Where toolward may go while signing in to a server: the rule every metadata URL and
//! endpoint is checked against before a request, and the resolver that applies it to the
//! addresses a host name resolves to.
//!
//! The rule, for a server whose MCP endpoint is `S`:
//! 1. No user name or password in the URL.
//! 2. A host that is an internal address ([`is_internal`]) is refused unless it is `S`'s own
//!    host, or a loopback address while `S` is on loopback itself. So a remote server's
//!    metadata cannot send toolward to `169.254.169.254`, to `10.0.0.5`, or to the
//!    operator's own machine.
//! 3. `https://` only, except on a loopback host (`localhost`, `127.0.0.0/8`, `::1`), where
//!    `http://` is accepted too (RFC 8252's loopback redirect, and local test servers).
//! 4. A host name is resolved by [`GuardedResolver`]: when a name other than `S`'s own host
//!    resolves to an internal address (loopback ones allowed only while `S` is on loopback),
//!    the connection is refused, so a public-looking name cannot lead inside either.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use oauth2::url;
use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use super::OAuthError;

/// The rule of where toolward goes for one server (see the module documentation).
#[derive(Debug, Clone)]
pub struct Origins {
    server: String,
    /// `S`'s host, lowercase (an IPv6 literal without brackets).
    host: String,
    /// Whether `S` is on a loopback host.
    loopback: bool,
}

impl Origins {
    /// The rule for server `server` whose MCP endpoint is `resource`.
    ///
    /// # Errors
    /// [`OAuthError::Refused`] when `resource` is not an `http(s)` URL with a host.
    pub fn for_server(server: &str, resource: &str) -> Result<Origins, OAuthError> {
        let refused = |rule: &str| OAuthError::Refused {
            server: server.to_owned(),
            what: String::from("the server's URL"),
            url: resource.to_owned(),
            rule: rule.to_owned(),
        };
        let url = Url::parse(resource).map_err(|_| refused("it is not a URL"))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(refused("it is not an `http://` or `https://` URL"));
        }
        let host = host_of(&url).ok_or_else(|| refused("it has no host"))?;
        let loopback = is_loopback_host(&host);
        Ok(Origins {
            server: server.to_owned(),
            host,
            loopback,
        })
    }

    /// Checks `url` (named `what` in the error) against the rule.
    ///
    /// # Errors
    /// [`OAuthError::Refused`] naming the rule it breaks.
    pub fn check(&self, what: &str, url: &Url) -> Result<(), OAuthError> {
        let refused = |rule: String| OAuthError::Refused {
            server: self.server.clone(),
            what: what.to_owned(),
            url: url.to_string(),
            rule,
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(refused(String::from(
                "a URL with a user name or password is refused",
            )));
        }
        let Some(host) = host_of(url) else {
            return Err(refused(String::from("it has no host")));
        };
        let loopback = is_loopback_host(&host);
        if host != self.host {
            if loopback && !self.loopback {
                return Err(refused(String::from(
                    "a loopback address is refused for a server that is not on loopback itself",
                )));
            }
            if !loopback
                && let Ok(ip) = host.parse::<IpAddr>()
                && is_internal(ip)
            {
                return Err(refused(format!(
                    "`{ip}` is an internal address (private, link-local, loopback or reserved), and not the server's own host"
                )));
            }
        }
        match url.scheme() {
            "https" => Ok(()),
            "http" if loopback => Ok(()),
            "http" => Err(refused(String::from(
                "only `https://` is accepted, except on a loopback host",
            ))),
            other => Err(refused(format!("the scheme `{other}` is not `https`"))),
        }
    }

    /// Whether an address that host `name` resolved to may be connected to.
    fn allows(&self, name: &str, ip: IpAddr) -> bool {
        if !is_internal(ip) {
            return true;
        }
        if name.eq_ignore_ascii_case(&self.host) {
            return true;
        }
        self.loopback && is_loopback_ip(ip)
    }
}

/// `url`'s host, lowercase, an IPv6 literal without its brackets.
fn host_of(url: &Url) -> Option<String> {
    match url.host()? {
        url::Host::Domain(domain) => Some(domain.trim_end_matches('.').to_ascii_lowercase()),
        url::Host::Ipv4(ip) => Some(ip.to_string()),
        url::Host::Ipv6(ip) => Some(ip.to_string()),
    }
}

/// Whether `host` (as [`host_of`] gives it) is a loopback host.
fn is_loopback_host(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host.parse::<IpAddr>().is_ok_and(is_loopback_ip)
}

fn is_loopback_ip(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// Whether `ip` is an address inside someone's network rather than a public one: loopback,
/// private (RFC 1918), link-local (the cloud metadata address `169.254.169.254` among
/// them), carrier-grade NAT (`100.64.0.0/10`), unspecified (`0.0.0.0/8`), the IETF's
/// `192.0.0.0/24`, benchmarking (`198.18.0.0/15`), reserved (`240.0.0.0/4`), broadcast,
/// multicast; for IPv6 loopback, unspecified, unique-local (`fc00::/7`), link-local
/// (`fe80::/10`), site-local (`fec0::/10`), multicast, and the IPv4 address inside an
/// IPv4-mapped (`::ffff:0:0/96`), IPv4-compatible (`::/96`), NAT64 (`64:ff9b::/96`) or 6to4
/// (`2002::/16`) one; the whole local-use NAT64 prefix `64:ff9b:1::/48`.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (18..20).contains(&b))
        || a >= 240
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_internal_v4(v4);
    }
    let segments = ip.segments();
    let octets = ip.octets();
    let [.., a, b, c, d] = octets;
    // The IPv4 address in the last 32 bits: NAT64's well-known prefix (`64:ff9b::/96`) and
    // the deprecated IPv4-compatible form (`::a.b.c.d`, `::/96` past `::` and `::1`).
    if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0]
        || (segments[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified())
    {
        return is_internal_v4(Ipv4Addr::new(a, b, c, d));
    }
    // 6to4 (`2002::/16`) carries an IPv4 address in bits 16 to 48.
    if segments[0] == 0x2002 {
        let [_, _, a, b, c, d, ..] = octets;
        return is_internal_v4(Ipv4Addr::new(a, b, c, d));
    }
    // The local-use NAT64 prefix (`64:ff9b:1::/48`, RFC 8215) places the IPv4 address where
    // its operator chose: all of it is refused.
    if segments[..3] == [0x64, 0xff9b, 1] {
        return true;
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (segments[0] & 0xfe00) == 0xfc00
        || (segments[0] & 0xffc0) == 0xfe80
        || (segments[0] & 0xffc0) == 0xfec0
}

/// The resolver of a server's OAuth client: the system's resolution, then every address
/// checked with the rule (see the module documentation, rule 4).
#[derive(Debug)]
pub struct GuardedResolver {
    origins: Arc<Origins>,
}

impl GuardedResolver {
    /// The resolver applying `origins`.
    pub fn new(origins: Arc<Origins>) -> GuardedResolver {
        GuardedResolver { origins }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let origins = Arc::clone(&self.origins);
        let host = name.as_str().trim_end_matches('.').to_ascii_lowercase();
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if let Some(bad) = found.iter().find(|addr| !origins.allows(&host, addr.ip())) {
                return Err(format!(
                    "`{host}` resolves to the internal address `{}`, and is not the server's own host",
                    bad.ip()
                )
                .into());
            }
            let addrs: Addrs = Box::new(found.into_iter());
            Ok(addrs)
        })
    }
}
