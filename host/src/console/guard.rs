//! The checks before any page: `Host` names the console, `Origin` is the console's own, a
//! `POST` comes from the console's own pages; and the headers every response carries.

use std::net::SocketAddr;

use http::{HeaderMap, HeaderValue, Method, header};

use super::ConsoleError;

/// The Content-Security-Policy of every response: only the console's own script, styles and
/// images, no inline script or style, no frames of it anywhere, forms only to itself.
pub(super) const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

/// Which hosts and origins are the console's.
#[derive(Debug)]
pub(super) struct Guard {
    /// `Host` values accepted, lowercase: the bound address (`127.0.0.1:8443`) and the public
    /// origins' hosts.
    hosts: Vec<String>,
    /// `Origin` values accepted, lowercase.
    origins: Vec<String>,
    /// Whether the console is reached over https (cookies get `Secure`).
    pub(super) secure: bool,
}

/// Why a request was refused before any page.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// `Host` is missing or not the console's.
    Host(String),
    /// `Origin` is not the console's.
    Origin(String),
    /// A `POST` without `Origin`, or from another site by `Sec-Fetch-Site`.
    CrossSite(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Host(host) => write!(
                f,
                "host `{host}` is not this console's: open it at its own address (a name that resolves here by another name is refused, against DNS rebinding)"
            ),
            Refused::Origin(origin) => write!(
                f,
                "origin `{origin}` is not this console's: a page of another site cannot use it"
            ),
            Refused::CrossSite(why) => write!(f, "refused a change {why}"),
        }
    }
}

impl Guard {
    /// The guard of a console bound to `addr` and reached also at `public_origins`.
    pub(super) fn new(addr: SocketAddr, public_origins: &[String]) -> Result<Guard, ConsoleError> {
        // Only the address bound, as written: not `localhost`, which a browser may send to
        // `[::1]` while the console holds `127.0.0.1`, nor the other loopback address, where
        // another program (a hostile server) can bind the same port and pass requests
        // through, keeping what they carry (an outside attack, 6 December 2026).
        let mut hosts = vec![format!("{}", addr).to_ascii_lowercase()];
        let mut origins: Vec<String> = hosts.iter().map(|host| format!("http://{host}")).collect();
        let mut secure = false;
        for origin in public_origins {
            let origin = origin.trim_end_matches('/').to_ascii_lowercase();
            let bad = || ConsoleError::BadOrigin {
                origin: crate::text::escape(&origin),
            };
            let (scheme, host) = origin.split_once("://").ok_or_else(bad)?;
            let plausible = !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c));
            if !plausible || !matches!(scheme, "http" | "https") {
                return Err(bad());
            }
            secure |= scheme == "https";
            // The default port is left out of `Host` by browsers.
            hosts.push(host.to_owned());
            origins.push(origin.clone());
        }
        Ok(Guard {
            hosts,
            origins,
            secure,
        })
    }

    /// Refuses a request whose `Host` or `Origin` is not the console's, and a `POST` that
    /// does not come from the console's own pages.
    pub(super) fn check(&self, method: &Method, headers: &HeaderMap) -> Result<(), Refused> {
        let shown = |value: &HeaderValue| {
            crate::text::escape(&String::from_utf8_lossy(value.as_bytes()))
        };
        let host = headers.get(header::HOST);
        let host_ok = host
            .and_then(|host| host.to_str().ok())
            .is_some_and(|host| self.hosts.contains(&host.to_ascii_lowercase()));
        if !host_ok {
            return Err(Refused::Host(host.map(shown).unwrap_or_default()));
        }
        let origin = headers.get(header::ORIGIN);
        if let Some(origin) = origin {
            let ok = origin
                .to_str()
                .is_ok_and(|origin| self.origins.contains(&origin.to_ascii_lowercase()));
            if !ok {
                return Err(Refused::Origin(shown(origin)));
            }
        }
        if method != Method::GET && method != Method::HEAD {
            if origin.is_none() {
                return Err(Refused::CrossSite(String::from(
                    "without an `Origin` header: changes are taken only from the console's own pages",
                )));
            }
            if let Some(site) = headers.get("sec-fetch-site")
                && site.as_bytes() != b"same-origin"
            {
                return Err(Refused::CrossSite(format!(
                    "from `Sec-Fetch-Site: {}`: changes are taken only from the console's own pages",
                    shown(site)
                )));
            }
        }
        Ok(())
    }
}

/// The headers every response carries (see the module's contract).
pub(super) fn secure_headers(headers: &mut HeaderMap) {
    let set = |headers: &mut HeaderMap, name: &'static str, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(headers, "content-security-policy", CSP);
    set(headers, "x-frame-options", "DENY");
    set(headers, "x-content-type-options", "nosniff");
    set(headers, "referrer-policy", "same-origin");
    set(headers, "cache-control", "no-store");
    set(headers, "cross-origin-opener-policy", "same-origin");
    set(headers, "cross-origin-resource-policy", "same-origin");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, HeaderValue::from_static(value));
        }
        map
    }

    fn guard() -> Guard {
        Guard::new("127.0.0.1:8443".parse().unwrap(), &[]).unwrap()
    }

    #[test]
    fn a_request_for_another_host_is_refused() {
        let g = guard();
        assert!(g.check(&Method::GET, &headers(&[("host", "127.0.0.1:8443")])).is_ok());
        // Only the address bound: `localhost` and the other loopback address may reach
        // another program on the same port.
        for other in ["localhost:8443", "[::1]:8443", "127.0.0.2:8443", "127.0.0.1:8444"] {
            let mut map = HeaderMap::new();
            map.insert("host", HeaderValue::from_str(other).unwrap());
            assert!(matches!(g.check(&Method::GET, &map), Err(Refused::Host(_))), "{other}");
        }
        assert!(matches!(
            g.check(&Method::GET, &headers(&[("host", "attacker.example:8443")])),
            Err(Refused::Host(_))
        ));
        assert!(matches!(g.check(&Method::GET, &headers(&[])), Err(Refused::Host(_))));
    }

    #[test]
    fn a_post_from_another_origin_or_without_one_is_refused() {
        let g = guard();
        let own = [("host", "127.0.0.1:8443"), ("origin", "http://127.0.0.1:8443")];
        assert!(g.check(&Method::POST, &headers(&own)).is_ok());
        assert!(matches!(
            g.check(
                &Method::POST,
                &headers(&[("host", "127.0.0.1:8443"), ("origin", "http://evil.example")])
            ),
            Err(Refused::Origin(_))
        ));
        assert!(matches!(
            g.check(&Method::POST, &headers(&[("host", "127.0.0.1:8443")])),
            Err(Refused::CrossSite(_))
        ));
        assert!(matches!(
            g.check(
                &Method::POST,
                &headers(&[
                    ("host", "127.0.0.1:8443"),
                    ("origin", "http://127.0.0.1:8443"),
                    ("sec-fetch-site", "cross-site")
                ])
            ),
            Err(Refused::CrossSite(_))
        ));
    }

    #[test]
    fn a_public_origin_is_accepted_and_makes_cookies_secure() {
        let g = Guard::new(
            "127.0.0.1:8443".parse().unwrap(),
            &[String::from("https://Console.Example/")],
        )
        .unwrap();
        assert!(g.secure);
        let via_proxy = [("host", "console.example"), ("origin", "https://console.example")];
        assert!(g.check(&Method::POST, &headers(&via_proxy)).is_ok());
        assert!(Guard::new("127.0.0.1:1".parse().unwrap(), &[String::from("ftp://x")]).is_err());
        assert!(
            Guard::new("127.0.0.1:1".parse().unwrap(), &[String::from("https://a/b\"")]).is_err()
        );
    }
}
