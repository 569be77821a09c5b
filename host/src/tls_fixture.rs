//! A TLS server on 127.0.0.1 for the tests of `ca_file`: its certificate (for `localhost` and
//! `127.0.0.1`) is signed by a CA made for the test with the `openssl` command, which no
//! built-in root trusts. Each connection is served in a thread of its own; each request is
//! answered by the test's function from its method, path and body.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What the fixture answers: status, content type and body.
pub(crate) type Answer = (u16, &'static str, String);

/// The running server and the files of its CA.
pub(crate) struct TlsFixture {
    /// The folder of the CA and the server's key, removed when the fixture is dropped.
    _dir: tempfile::TempDir,
    /// The CA's certificate (PEM): what `ca_file` names.
    pub ca_file: PathBuf,
    /// The port on 127.0.0.1.
    pub port: u16,
    /// Requests answered (over a completed handshake).
    pub answered: Arc<AtomicUsize>,
}

/// Runs `openssl` with `args` (split at spaces) in `dir`.
fn openssl(dir: &Path, args: &str) {
    let output = Command::new("openssl")
        .args(args.split_whitespace())
        .current_dir(dir)
        .output()
        .expect("the openssl command runs");
    assert!(
        output.status.success(),
        "openssl {args}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Makes a CA in `path` (`ca.pem`, `ca.key`) and a certificate it signs for `localhost` and
/// `127.0.0.1` (`server.pem`, `server.key`); the path of `ca.pem`.
pub(crate) fn make_ca(path: &Path) -> PathBuf {
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes";
    openssl(
        path,
        &format!(
            "req -x509 {key} -keyout ca.key -out ca.pem -days 2 -subj /CN=toolward-test-ca \
             -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign"
        ),
    );
    openssl(
        path,
        &format!(
            "req {key} -keyout server.key -out server.csr -subj /CN=localhost \
             -addext subjectAltName=DNS:localhost,IP:127.0.0.1"
        ),
    );
    openssl(
        path,
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem \
         -days 2 -copy_extensions copy",
    );
    path.join("ca.pem")
}

impl TlsFixture {
    /// Makes the CA and the server's certificate, and starts serving.
    pub(crate) fn start(answer: fn(&str, &str, &[u8]) -> Answer) -> TlsFixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path();
        let ca_file = make_ca(path);
        let chain = CertificateDer::pem_file_iter(path.join("server.pem"))
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(path.join("server.key")).unwrap();
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap(),
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let answered = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&answered);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let config = Arc::clone(&config);
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || serve(stream, config, answer, &counter));
            }
        });
        TlsFixture {
            ca_file,
            _dir: dir,
            port,
            answered,
        }
    }
}

impl TlsFixture {
    /// The CA as `ca_file` gives it.
    pub(crate) fn bundle(&self) -> crate::config::CaBundle {
        crate::config::CaBundle {
            file: self.ca_file.clone(),
            certificates: CertificateDer::pem_file_iter(&self.ca_file)
                .unwrap()
                .map(|certificate| certificate.unwrap().as_ref().to_vec())
                .collect(),
        }
    }
}

/// Answers the requests of one connection until it closes or fails (a client that refuses the
/// certificate ends the handshake).
fn serve(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    answer: fn(&str, &str, &[u8]) -> Answer,
    answered: &AtomicUsize,
) {
    let Ok(connection) = rustls::ServerConnection::new(config) else {
        return;
    };
    let mut reader = BufReader::new(rustls::StreamOwned::new(connection, stream));
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let target = parts.next().unwrap_or_default().to_owned();
        let mut length = 0;
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let (status, content_type, text) = answer(&method, &target, &body);
        answered.fetch_add(1, Ordering::SeqCst);
        let response = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{text}",
            text.len()
        );
        let stream = reader.get_mut();
        if stream.write_all(response.as_bytes()).is_err() || stream.flush().is_err() {
            return;
        }
    }
}
