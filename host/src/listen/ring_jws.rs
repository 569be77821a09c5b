//! JWS signatures verified with `ring`: the `jsonwebtoken` crate's [`CryptoProvider`] for the
//! listener's access tokens.
//!
//! `jsonwebtoken` 12 leaves its cryptography to a provider chosen by Cargo feature
//! (`aws_lc_rs`, a C build the workspace keeps out; `rust_crypto`, a second RSA and
//! elliptic-curve stack) or installed by the program. toolward installs this one, which
//! verifies with `ring`, the provider its rustls already uses, and does nothing else:
//!
//! - **verification only**: the listener never signs, so the signer factory refuses;
//! - **no HMAC**: `HS256`/`HS384`/`HS512` verify with a shared secret, and a verifier that
//!   took the issuer's public key as that secret would accept a token anyone signed with it
//!   (algorithm confusion); the factory refuses them whatever key it is given;
//! - **the key's family must be the algorithm's** (an RSA key for `RS*`/`PS*`, an EC key for
//!   `ES*`, an Ed25519 key for `EdDSA`), and `ring` itself refuses RSA moduli under 2048
//!   bits and points not on the curve.
//!
//! [`install`] makes it the process's provider once; when the embedding program installed
//! another first, that one stays (`jsonwebtoken` allows one per process) and it is what
//! verifies.

use jsonwebtoken::crypto::{CryptoProvider, JwtSigner, JwtVerifier, KeyUtils};
use jsonwebtoken::errors::{Error, ErrorKind};
use jsonwebtoken::signature;
use jsonwebtoken::{Algorithm, DecodingKey, DecodingKeyKind, EncodingKey};
use ring::signature::{self as ring_sig, RsaPublicKeyComponents, UnparsedPublicKey};

/// The provider: verification with `ring`, no signing, no HMAC.
pub static RING_PROVIDER: CryptoProvider = CryptoProvider {
    signer_factory: no_signer,
    verifier_factory: verifier,
    key_utils: KeyUtils::new_unimplemented(),
};

/// Makes [`RING_PROVIDER`] the process's `jsonwebtoken` provider, unless one is installed
/// already (then that one verifies).
pub fn install() {
    let _ = RING_PROVIDER.install_default();
}

fn no_signer(_: &Algorithm, _: &EncodingKey) -> Result<Box<dyn JwtSigner>, Error> {
    Err(ErrorKind::InvalidAlgorithm.into())
}

/// How one algorithm is verified by `ring`.
#[derive(Clone, Copy)]
enum Scheme {
    Rsa(&'static ring_sig::RsaParameters),
    Ecdsa(&'static ring_sig::EcdsaVerificationAlgorithm),
    Ed25519,
}

fn scheme(algorithm: Algorithm) -> Option<Scheme> {
    Some(match algorithm {
        Algorithm::RS256 => Scheme::Rsa(&ring_sig::RSA_PKCS1_2048_8192_SHA256),
        Algorithm::RS384 => Scheme::Rsa(&ring_sig::RSA_PKCS1_2048_8192_SHA384),
        Algorithm::RS512 => Scheme::Rsa(&ring_sig::RSA_PKCS1_2048_8192_SHA512),
        Algorithm::PS256 => Scheme::Rsa(&ring_sig::RSA_PSS_2048_8192_SHA256),
        Algorithm::PS384 => Scheme::Rsa(&ring_sig::RSA_PSS_2048_8192_SHA384),
        Algorithm::PS512 => Scheme::Rsa(&ring_sig::RSA_PSS_2048_8192_SHA512),
        Algorithm::ES256 => Scheme::Ecdsa(&ring_sig::ECDSA_P256_SHA256_FIXED),
        Algorithm::ES384 => Scheme::Ecdsa(&ring_sig::ECDSA_P384_SHA384_FIXED),
        Algorithm::EdDSA => Scheme::Ed25519,
        // HMAC, and whatever a later version adds: refused.
        _ => return None,
    })
}

fn verifier(algorithm: &Algorithm, key: &DecodingKey) -> Result<Box<dyn JwtVerifier>, Error> {
    let Some(scheme) = scheme(*algorithm) else {
        return Err(ErrorKind::InvalidAlgorithm.into());
    };
    if key.family() != algorithm.family() {
        return Err(ErrorKind::InvalidKeyFormat.into());
    }
    Ok(Box::new(RingVerifier {
        algorithm: *algorithm,
        scheme,
        key: key.clone(),
    }))
}

/// One key, checked against one algorithm.
struct RingVerifier {
    algorithm: Algorithm,
    scheme: Scheme,
    key: DecodingKey,
}

impl signature::Verifier<Vec<u8>> for RingVerifier {
    fn verify(&self, message: &[u8], signature: &Vec<u8>) -> Result<(), signature::Error> {
        let verified = match (self.scheme, self.key.kind()) {
            (Scheme::Rsa(parameters), DecodingKeyKind::RsaModulusExponent { n, e }) => {
                RsaPublicKeyComponents { n, e }.verify(parameters, message, signature)
            }
            (Scheme::Rsa(parameters), DecodingKeyKind::SecretOrDer(der)) => {
                UnparsedPublicKey::new(parameters, der).verify(message, signature)
            }
            (Scheme::Ecdsa(parameters), DecodingKeyKind::SecretOrDer(point)) => {
                UnparsedPublicKey::new(parameters, point).verify(message, signature)
            }
            (Scheme::Ed25519, DecodingKeyKind::SecretOrDer(public)) => {
                UnparsedPublicKey::new(&ring_sig::ED25519, public).verify(message, signature)
            }
            _ => return Err(signature::Error::new()),
        };
        verified.map_err(|_| signature::Error::new())
    }
}

impl JwtVerifier for RingVerifier {
    fn algorithm(&self) -> Algorithm {
        self.algorithm
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_is_refused_whatever_the_key() {
        let key = DecodingKey::from_rsa_raw_components(&[1; 256], &[1, 0, 1]);
        for algorithm in [Algorithm::HS256, Algorithm::HS384, Algorithm::HS512] {
            assert!(verifier(&algorithm, &key).is_err(), "{algorithm:?}");
            let secret = DecodingKey::from_secret(b"public key bytes").unwrap();
            assert!(verifier(&algorithm, &secret).is_err(), "{algorithm:?}");
        }
    }

    #[test]
    fn a_key_of_another_family_is_refused() {
        let rsa = DecodingKey::from_rsa_raw_components(&[1; 256], &[1, 0, 1]);
        assert!(verifier(&Algorithm::ES256, &rsa).is_err());
        assert!(verifier(&Algorithm::EdDSA, &rsa).is_err());
        let ec = DecodingKey::from_ec_der(&[4; 65]);
        assert!(verifier(&Algorithm::RS256, &ec).is_err());
        assert!(no_signer(&Algorithm::RS256, &EncodingKey::from_secret(b"x").unwrap()).is_err());
    }
}
