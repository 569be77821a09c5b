//! `oci://` references in `rules.component` and `policy.component`, and on the command line
//! (`toolward policy push`, `pull`, `sign`): `oci://REGISTRY/REPOSITORY[:TAG][@sha256:HEX]`.
//!
//! Unlike Docker's short names, the first part is always the registry (`ghcr.io`,
//! `127.0.0.1:5000`): no registry is implied, so a reference means the same thing on every
//! machine. Names follow the OCI distribution specification's grammar: a repository is
//! lowercase path parts of `[a-z0-9]` joined by `.`, `_`, `__` or runs of `-`; a tag is
//! `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`; the only digest algorithm is `sha256` (64 lowercase hex
//! digits).

use std::fmt;

/// The scheme every reference starts with in the config (optional on the command line).
pub const OCI_SCHEME: &str = "oci://";
/// Longest repository name, in characters: 255 (what registries such as the distribution
/// registry accept with the registry host).
pub const MAX_REPOSITORY_CHARS: usize = 255;
/// Longest tag, in characters: 128 (the OCI distribution specification).
pub const MAX_TAG_CHARS: usize = 128;

/// A component's place in an OCI registry: `REGISTRY/REPOSITORY[:TAG][@sha256:HEX]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OciReference {
    /// The registry's host, with its port when it has one (`127.0.0.1:5000`, `ghcr.io`).
    pub registry: String,
    /// The repository in it (`policies/deny-writes`).
    pub repository: String,
    /// The tag, when one is given (`v1`): resolved by `toolward policy pull`, never trusted by
    /// `serve`.
    pub tag: Option<String>,
    /// The manifest's digest, `sha256:` and 64 lowercase hex digits: what a config pins.
    pub digest: Option<String>,
}

impl OciReference {
    /// Parses `text`, with or without the leading `oci://`.
    ///
    /// # Errors
    /// Why the text is not a reference, naming the part at fault (no registry, an uppercase
    /// repository, a digest that is not `sha256:` and 64 lowercase hex digits).
    pub fn parse(text: &str) -> Result<Self, String> {
        let rest = text.strip_prefix(OCI_SCHEME).unwrap_or(text);
        let (rest, digest) = match rest.split_once('@') {
            Some((name, digest)) => {
                if !is_sha256_digest(digest) {
                    return Err(format!(
                        "the digest `{digest}` is not `sha256:` followed by 64 lowercase hex digits"
                    ));
                }
                (name, Some(digest.to_owned()))
            }
            None => (rest, None),
        };
        let Some((registry, path)) = rest.split_once('/') else {
            return Err(
                "no repository: write `oci://REGISTRY/REPOSITORY@sha256:…` (the registry is never implied)"
                    .to_owned(),
            );
        };
        if !is_registry(registry) {
            return Err(format!(
                "`{registry}` is not a registry host (`name.example`, `host:port`, `127.0.0.1:5000`)"
            ));
        }
        // A tag is after the last `:` of the last path part (a registry's port is before the
        // first `/`).
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repository, tag)) if !tag.contains('/') => (repository, Some(tag)),
            _ => (path, None),
        };
        if !is_repository(repository) {
            return Err(format!(
                "`{repository}` is not a repository name (lowercase letters, digits and `._-` separators in `/`-separated parts, at most {MAX_REPOSITORY_CHARS} characters)"
            ));
        }
        if let Some(tag) = tag
            && !is_tag(tag)
        {
            return Err(format!(
                "`{tag}` is not a tag (`[A-Za-z0-9_][A-Za-z0-9._-]`, at most {MAX_TAG_CHARS} characters)"
            ));
        }
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest,
        })
    }

    /// The same repository pinned to `digest`, without a tag: what a config names.
    #[must_use]
    pub fn pinned(&self, digest: &str) -> Self {
        Self {
            registry: self.registry.clone(),
            repository: self.repository.clone(),
            tag: None,
            digest: Some(digest.to_owned()),
        }
    }

    /// `REGISTRY/REPOSITORY`: cosign's `docker-reference` in a signature's payload.
    #[must_use]
    pub fn repository_name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{OCI_SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// Whether `digest` is `sha256:` and 64 lowercase hex digits.
#[must_use]
pub fn is_sha256_digest(digest: &str) -> bool {
    digest.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn is_registry(registry: &str) -> bool {
    let (host, port) = match registry.rsplit_once(':') {
        // `[::1]:5000`
        Some((host, port)) if !host.is_empty() && !port.contains(']') => (host, Some(port)),
        _ => (registry, None),
    };
    if let Some(port) = port
        && (port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return inner.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

fn is_repository(repository: &str) -> bool {
    repository.len() <= MAX_REPOSITORY_CHARS && repository.split('/').all(is_path_part)
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn is_path_part(part: &str) -> bool {
    let bytes = part.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &part[start..i];
        let dashes = separator.bytes().all(|b| b == b'-');
        if !(separator == "." || separator == "_" || separator == "__" || dashes) {
            return false;
        }
    }
    true
}

fn is_tag(tag: &str) -> bool {
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_TAG_CHARS
        && (bytes[0].is_ascii_alphanumeric() || bytes[0] == b'_')
        && bytes
            .iter()
            .all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn parse_reads_registry_repository_tag_and_digest() {
        let r = OciReference::parse(&format!("oci://127.0.0.1:5000/policies/deny:v1@{DIGEST}"))
            .unwrap();
        assert_eq!(r.registry, "127.0.0.1:5000");
        assert_eq!(r.repository, "policies/deny");
        assert_eq!(r.tag.as_deref(), Some("v1"));
        assert_eq!(r.digest.as_deref(), Some(DIGEST));
        assert_eq!(
            r.pinned(DIGEST).to_string(),
            format!("oci://127.0.0.1:5000/policies/deny@{DIGEST}")
        );
        let r = OciReference::parse("ghcr.io/org/p").unwrap();
        assert_eq!((r.tag, r.digest), (None, None));
    }

    #[test]
    fn parse_refuses_what_is_not_a_reference() {
        for bad in [
            "oci://policy",
            "oci://ghcr.io/Org/p",
            "oci://ghcr.io/org/p@sha256:ABC",
            "oci://ghcr.io/org/p@sha512:00",
            "oci://ghcr.io/org/p:",
            "oci://ghcr.io//p",
            "oci://gh cr.io/org/p",
            "oci://ghcr.io:99999x/org/p",
        ] {
            assert!(OciReference::parse(bad).is_err(), "{bad}");
        }
    }
}
