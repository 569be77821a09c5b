//! The host of a URL argument, read by hand and strictly.
//!
//! URL parsers disagree (RFC 3986 and the WHATWG URL standard, and each library's
//! leniencies), and a URL that two parsers read as two hosts is how an allowlist is
//! bypassed. So this reader accepts only the shape on which they agree,
//! `http[s]://host[:port][/...|?...|#...]`, and refuses the rest; the caller denies a
//! refused URL rather than guess:
//!
//! - the scheme is `http` or `https`, in any case, followed by `//`
//!   (WHATWG reads `https:api.example.com` and `https:///api.example.com` as having a host,
//!   RFC 3986 does not);
//! - no userinfo: any `@` in the authority is refused. `https://user@evil.net@api.example.com/`
//!   has host `api.example.com` to a WHATWG parser (last `@`) and `evil.net@api.example.com`
//!   or `evil.net` to others (first `@`); nobody needs credentials in a tool's URL;
//! - no backslash, space or control character anywhere (WHATWG reads `\` as `/` and drops
//!   tabs and newlines; RFC 3986 does neither);
//! - the host is ASCII letters, digits, `-`, `.` and `_` (so no percent-escape, which WHATWG
//!   decodes), or a bracketed IPv6 literal; the port, when present, is 1 to 5 digits up to
//!   65535.
//!
//! The host is compared without regard to ASCII case, with one trailing `.` dropped
//! (`api.example.com.` is the same DNS name). The port is not compared: the allowlist
//! names hosts. A host is on the allowlist only when it equals an entry: a suffix does not
//! count, so `api.example.com.evil.net` is not `api.example.com`. IP addresses are compared
//! as written: `0x7f.1` is not `127.0.0.1` here (it is held, not allowed).

/// The host of `url`, a slice of it (original case, trailing `.` dropped); otherwise the
/// fault, worded to follow "URL `...`".
pub(crate) fn host(url: &str) -> Result<&str, String> {
    if url.chars().any(|c| c == '\\' || c == ' ' || c.is_control()) {
        return Err("holds a backslash, a space or a control character".to_owned());
    }
    let Some((scheme, rest)) = url.split_once(':') else {
        return Err("has no scheme".to_owned());
    };
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return Err(format!(
            "has scheme `{scheme}`; only `http` and `https` are read"
        ));
    }
    let Some(rest) = rest.strip_prefix("//") else {
        return Err("has no `//` before its host".to_owned());
    };
    let authority = rest
        .find(['/', '?', '#'])
        .map_or(rest, |end| rest.get(..end).unwrap_or(rest));
    if authority.contains('@') {
        return Err(
            "carries userinfo (an `@` before the host), which can disguise the host".to_owned(),
        );
    }
    let (host, port) = if authority.starts_with('[') {
        let Some(end) = authority.find(']') else {
            return Err("has an IPv6 host without its closing `]`".to_owned());
        };
        let (host, after) = authority.split_at(end + 1);
        if !host.get(1..host.len() - 1).is_some_and(|inner| {
            !inner.is_empty()
                && inner
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        }) {
            return Err(format!("has an unreadable IPv6 host `{host}`"));
        }
        match after {
            "" => (host, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(format!("has `{after}` after its IPv6 host")),
            },
        }
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if let Some(port) = port {
        let digits =
            !port.is_empty() && port.len() <= 5 && port.bytes().all(|b| b.is_ascii_digit());
        if !digits || port.parse::<u32>().map_or(true, |p| p > 65_535) {
            return Err(format!(
                "has port `{port}`, which is not a number up to 65535"
            ));
        }
    }
    if host.starts_with('[') {
        return Ok(host);
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    if host.is_empty() {
        return Err("has no host".to_owned());
    }
    let readable = host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if !readable || host.starts_with('.') || host.contains("..") {
        return Err(format!(
            "has host `{host}`, which is not a plain DNS name (use the `xn--` form for an international name)"
        ));
    }
    Ok(host)
}
