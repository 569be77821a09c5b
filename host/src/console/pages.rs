//! The pages: routing, sign-in, the held calls and their answers, the audit. Every value a
//! page shows passes [`text::escape`] here and minijinja's HTML autoescaping in the template.

use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use minijinja::{Environment, context};
use serde::Serialize;

use super::guard::{Guard, secure_headers};
use super::oidc::{CALLBACK_PATH, FINISH_PATH, START_PATH, SignInError};
use super::session::{Session, Sessions};
use super::{
    CHAIN_CHECK_INTERVAL, ConsoleError, KEY_HEADER, LOGIN_COOKIE, MAX_AUDIT_ROWS, MAX_DETAIL_BYTES,
    MAX_FORM_BYTES, MAX_REASON_CHARS, POLL_INTERVAL, SCRIPT_PATH, SESSION_COOKIE, SHOWN_HEADER,
};
use super::store::{AnswerRefused, Store};
use crate::approval::{AnsweredBy, PendingEntry, display_arguments, display_result};
use crate::audit::read::{Filter, parse_time, utc};
use crate::identity::{Approvers, HeldCall};
use crate::audit::AuditDecision;
use crate::text;

const SCRIPT: &str = include_str!("static/console.js");
/// How long a form body may take to arrive.
const FORM_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
const STYLE: &str = include_str!("static/console.css");
const STYLE_PATH: &str = "/static/console.css";

/// What every connection's requests share.
pub(super) struct Shared {
    pub(super) guard: Guard,
    pub(super) pages: Pages,
    pub(super) sessions: Sessions,
    /// The state folder, or the fleet's database.
    pub(super) store: Arc<Store>,
    pub(super) chain: Arc<Mutex<ChainState>>,
    pub(super) tools: super::tools::Tools,
    pub(super) approvers: Approvers,
    /// The OpenID provider users may also sign in with (`console.oidc`).
    pub(super) oidc: Option<super::oidc::Provider>,
    /// Refusals recorded per user in the current minute (see [`MAX_REFUSALS_RECORDED`]).
    pub(super) refusals: PerMinute,
    /// Sign-ins per user in the current minute (see [`MAX_SIGN_INS_PER_MINUTE`]).
    pub(super) sign_ins: PerMinute,
}

/// Counts per user, for the minute since each user's first count.
#[derive(Default)]
pub(super) struct PerMinute(Mutex<std::collections::HashMap<String, (std::time::Instant, u32)>>);

impl PerMinute {
    /// Counts one for `user`; whether that keeps them within `max` this minute.
    fn within(&self, user: &str, max: u32) -> bool {
        let now = std::time::Instant::now();
        let mut counts = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        // Forget the minutes that ended, so the table holds this minute's users only.
        counts.retain(|_, (since, _)| now.duration_since(*since) < std::time::Duration::from_secs(60));
        let (_, count) = counts.entry(user.to_owned()).or_insert((now, 0));
        *count = count.saturating_add(1);
        *count <= max
    }
}

/// Most sign-ins of one user a minute: 10. Each is an audit record; past it a sign-in is
/// refused (429), so a token holder cannot grow the chain by signing in again and again.
pub const MAX_SIGN_INS_PER_MINUTE: u32 = 10;

/// Most refused answers and accepts recorded in the audit chain per user and minute: 10.
/// Past it a refusal is logged, not recorded: a signed-in user who may answer nothing would
/// otherwise grow the chain (and, in a fleet, take the head's lock every gateway's calls
/// need) as fast as they can post.
pub const MAX_REFUSALS_RECORDED: u32 = 10;

impl Shared {
    /// Records a refusal of `user`'s (`answer-refused`, `accept-refused`), unless they had
    /// [`MAX_REFUSALS_RECORDED`] this minute already: then it is logged.
    pub(super) async fn record_refusal(
        &self,
        user: &str,
        groups: &[String],
        action: &'static str,
        reason: String,
        detail: serde_json::Map<String, serde_json::Value>,
    ) {
        if self.refusals.within(user, MAX_REFUSALS_RECORDED) {
            // Logged inside when it cannot be written; the refusal stands either way.
            let _ = self.record(user, groups, action, reason, detail).await;
        } else {
            tracing::warn!(
                "console: `{}`'s {action} not recorded: more than {MAX_REFUSALS_RECORDED} refusals this minute ({})",
                text::escape(user),
                text::escape(&reason)
            );
        }
    }

    /// Records a console action of `user` (in `groups`) in the audit chain: `action`, with
    /// `detail` merged into the record's detail; whether it was written. A state folder's log
    /// is opened for each record, with its head: the console starts, and shows a broken
    /// chain, even when the log could not be written; an action that cannot be recorded is
    /// logged instead.
    pub(super) async fn record(
        &self,
        user: &str,
        groups: &[String],
        action: &'static str,
        reason: String,
        mut detail: serde_json::Map<String, serde_json::Value>,
    ) -> bool {
        detail.insert(String::from("action"), action.into());
        if !groups.is_empty() {
            detail.insert(String::from("groups"), groups.into());
        }
        let event = crate::audit::AuditEvent {
            principal: Some(user.to_owned()),
            reason: Some(reason),
            detail: Some(serde_json::Value::Object(detail)),
            ..crate::audit::AuditEvent::new(crate::audit::AuditKind::Console)
        };
        match self.store.record(event).await {
            Ok(()) => true,
            Err(error) => {
                tracing::error!(
                    "console: cannot record `{}`'s {action} in the audit log: {}",
                    text::escape(user),
                    text::escape(&error)
                );
                false
            }
        }
    }
}

/// The signed-in user as an answerer: their name and groups, through the console.
pub(super) fn answerer(session: &Session) -> AnsweredBy {
    AnsweredBy::console_user(&session.user, &session.groups)
}

/// The held call `request` as approver rules judge it. The console answers as its user, not
/// as an operating-system user, so whose uid holds the call does not matter.
fn held(request: &crate::approval::ApprovalRequest) -> HeldCall<'_> {
    HeldCall {
        server: &request.server,
        effect: &request.effect,
        principal: &request.principal,
        holder_uid: None,
    }
}

/// The templates, compiled in.
pub(super) struct Pages {
    env: Environment<'static>,
}

impl Pages {
    pub(super) fn new() -> Result<Pages, ConsoleError> {
        let mut env = Environment::new();
        // `.html` templates are autoescaped (minijinja's default); set it anyway, so a
        // renamed template cannot lose it.
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::Html);
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        for (name, source) in [
            ("base.html", include_str!("templates/base.html")),
            ("login.html", include_str!("templates/login.html")),
            ("approvals.html", include_str!("templates/approvals.html")),
            ("held.html", include_str!("templates/held.html")),
            ("audit.html", include_str!("templates/audit.html")),
            ("error.html", include_str!("templates/error.html")),
            ("shell.html", include_str!("templates/shell.html")),
            ("signed-in.html", include_str!("templates/signed-in.html")),
            ("tools.html", include_str!("templates/tools.html")),
            ("oidc-start.html", include_str!("templates/oidc-start.html")),
            ("oidc-callback.html", include_str!("templates/oidc-callback.html")),
        ] {
            env.add_template(name, source)
                .map_err(|error| ConsoleError::Templates(error.to_string()))?;
        }
        Ok(Pages { env })
    }

    pub(super) fn render(&self, name: &str, status: StatusCode, values: minijinja::Value) -> Response<Body> {
        match self
            .env
            .get_template(name)
            .and_then(|template| template.render(values))
        {
            Ok(html) => respond(status, "text/html; charset=utf-8", html),
            Err(error) => {
                tracing::error!("the console's page `{name}` failed to render: {error:#}");
                respond(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "text/plain; charset=utf-8",
                    String::from("the page failed to render; the console's log says why\n"),
                )
            }
        }
    }
}

pub(super) type Body = Full<Bytes>;

fn respond(status: StatusCode, content_type: &'static str, body: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

pub(super) fn redirect(to: &'static str) -> Response<Body> {
    let mut response = respond(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", String::new());
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    response
}

fn set_cookie(response: &mut Response<Body>, cookie: String) {
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
}

/// `name=value` with the console's attributes; `max_age` 0 removes it.
fn cookie(name: &str, value: &str, secure: bool, max_age: Option<u64>) -> String {
    let mut text = format!("{name}={value}; Path=/; HttpOnly; SameSite=Strict");
    if secure {
        text.push_str("; Secure");
    }
    if let Some(age) = max_age {
        text.push_str(&format!("; Max-Age={age}"));
    }
    text
}

/// The values of the cookies named `name` in the request's `Cookie` headers, at most
/// [`MAX_COOKIE_VALUES`]. A browser sends every cookie of the host whatever its port, so a
/// page on another port of the same host can plant one of the same name with a narrower
/// path: which one is the console's own is told by what it names (a session whose key the
/// request carries, a nonce this console made), never by its place.
fn cookie_values(headers: &http::HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| {
            let (key, value) = pair.trim().split_once('=')?;
            (key == name).then(|| value.to_owned())
        })
        .take(MAX_COOKIE_VALUES)
        .collect()
}

/// Most cookies of one name looked at: 16.
const MAX_COOKIE_VALUES: usize = 16;

/// `Set-Cookie` values that remove cookies named `name` that another page of the same host
/// planted on one of the console's paths (see [`cookie_value`]).
fn planted_cleared(name: &str, secure: bool) -> Vec<String> {
    [
        "/login",
        "/logout",
        "/approvals",
        "/approvals/list",
        "/approvals/answer",
        "/audit",
        "/tools",
        "/tools/accept",
    ]
        .iter()
        .map(|path| {
            let mut text = format!("{name}=; Path={path}; HttpOnly; SameSite=Strict; Max-Age=0");
            if secure {
                text.push_str("; Secure");
            }
            text
        })
        .collect()
}

/// The fields of a form body (`application/x-www-form-urlencoded`), at most
/// [`MAX_FORM_BYTES`]; `None` when it is longer or cannot be read.
async fn form(request: Request<Incoming>) -> Option<Vec<(String, String)>> {
    // A body sent a byte at a time would hold a connection for as long as the sender likes.
    let body = tokio::time::timeout(
        FORM_READ_TIMEOUT,
        Limited::new(request.into_body(), MAX_FORM_BYTES).collect(),
    )
    .await
    .ok()?
    .ok()?
    .to_bytes();
    Some(
        form_urlencoded::parse(&body)
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect(),
    )
}

pub(super) fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

/// One request: the guard, then the route; the security headers on every answer.
pub(super) async fn handle(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let mut response = route(shared, request).await;
    secure_headers(response.headers_mut());
    response
}

async fn route(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    if let Err(refused) = shared.guard.check(request.method(), request.headers()) {
        tracing::warn!("console: {refused}");
        return respond(
            StatusCode::FORBIDDEN,
            "text/plain; charset=utf-8",
            format!("{refused}\n"),
        );
    }
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    match (&method, path.as_str()) {
        (&Method::GET, SCRIPT_PATH) => {
            return respond(
                StatusCode::OK,
                "text/javascript; charset=utf-8",
                SCRIPT.to_owned(),
            );
        }
        (&Method::GET, STYLE_PATH) => {
            return respond(StatusCode::OK, "text/css; charset=utf-8", STYLE.to_owned());
        }
        (&Method::GET, "/login") => {
            let brought = cookie_values(request.headers(), LOGIN_COOKIE)
                .into_iter()
                .find(|nonce| shared.sessions.nonce_alive(nonce));
            return login_page(shared, StatusCode::OK, None, brought);
        }
        (&Method::POST, "/login") => return login(shared, request).await,
        (&Method::POST, START_PATH) if shared.oidc.is_some() => return oidc_start(shared),
        (&Method::GET, CALLBACK_PATH) if shared.oidc.is_some() => {
            // The provider's answer is read by the page's script, which posts it with the
            // flow it kept (see `super::oidc`); this page holds nothing of it.
            return shared.pages.render(
                "oidc-callback.html",
                StatusCode::OK,
                context! { title => "Signing in", user => None::<String>, flash => None::<String>, finish => FINISH_PATH, clean => CALLBACK_PATH },
            );
        }
        (&Method::POST, FINISH_PATH) if shared.oidc.is_some() => {
            return oidc_finish(shared, request).await;
        }
        _ => {}
    }
    // A session is its cookie and its key together (the module's contract, 5): the cookie
    // whose session has the key the request carries.
    let key = request.headers().get(KEY_HEADER);
    let found = key.and_then(|key| {
        cookie_values(request.headers(), SESSION_COOKIE)
            .into_iter()
            .find_map(|id| {
                let session = shared.sessions.get(&id)?;
                super::session::same(key.as_bytes(), session.key.as_bytes())
                    .then_some((id, session))
            })
    });
    let Some((id, mut session)) = found else {
        return match (&method, path.as_str(), key) {
            (&Method::GET, "/", _) => redirect("/approvals"),
            // A page opened by its address: the shell, whose script asks again with the key
            // it holds, or goes to sign in.
            (&Method::GET, "/approvals" | "/audit" | "/tools", None) => shell(shared),
            (&Method::GET, "/approvals/list" | "/approvals" | "/audit" | "/tools", _) => unauthorized(
                "sign in first: no session of this console has this browser's key and cookie",
            ),
            (&Method::GET, _, _) => not_found(),
            _ => {
                tracing::warn!("console: refused a change without a session's key and cookie");
                respond(
                    StatusCode::FORBIDDEN,
                    "text/plain; charset=utf-8",
                    String::from(
                        "sign in first: this change does not carry a session's key and cookie, so it did not come from a signed-in page of this console\n",
                    ),
                )
            }
        };
    };
    session.flash = shared.sessions.take_flash(&id);
    match (&method, path.as_str()) {
        (&Method::GET, "/") => redirect("/approvals"),
        (&Method::GET, "/approvals") => approvals_page(shared, &session, None).await,
        (&Method::GET, "/approvals/list") => {
            let shown = request
                .headers()
                .get(SHOWN_HEADER)
                .map(|shown| String::from_utf8_lossy(shown.as_bytes()).into_owned());
            approvals_page(shared, &session, Some(shown)).await
        }
        (&Method::GET, "/audit") => audit_page(shared, &session, request.uri().query()).await,
        (&Method::GET, "/tools") => super::tools::page(shared, &session).await,
        (&Method::POST, "/tools/accept") => {
            let Some(fields) = form(request).await else {
                return error_page(shared, &session, StatusCode::BAD_REQUEST, "the form could not be read (longer than the limit, or cut short)");
            };
            super::tools::accept(shared, &id, &session, &fields).await
        }
        (&Method::POST, "/logout") => {
            shared.sessions.end(&id);
            tracing::info!("console: `{}` signed out", text::escape(&session.user));
            let mut response = redirect("/login");
            set_cookie(
                &mut response,
                cookie(SESSION_COOKIE, "", shared.guard.secure, Some(0)),
            );
            response
        }
        (&Method::POST, "/approvals/answer") => {
            let Some(fields) = form(request).await else {
                return error_page(shared, &session, StatusCode::BAD_REQUEST, "the form could not be read (longer than the limit, or cut short)");
            };
            answer(shared, &id, &session, &fields).await
        }
        _ => error_page(
            shared,
            &session,
            StatusCode::NOT_FOUND,
            "no such page: the console has /approvals, /audit and /tools",
        ),
    }
}

fn unauthorized(why: &str) -> Response<Body> {
    respond(
        StatusCode::UNAUTHORIZED,
        "text/plain; charset=utf-8",
        format!("{why}\n"),
    )
}

fn not_found() -> Response<Body> {
    respond(
        StatusCode::NOT_FOUND,
        "text/plain; charset=utf-8",
        String::from("no such page\n"),
    )
}

/// A page opened by its address, with the cookie but not the key: nothing of the session,
/// only the script that asks for the page again with the key it holds.
fn shell(shared: &Shared) -> Response<Body> {
    shared.pages.render(
        "shell.html",
        StatusCode::OK,
        context! { title => "Loading", user => None::<String>, flash => None::<String> },
    )
}

/// The sign-in form, with the nonce `keep` when the browser brought a live one, else a new
/// one.
fn login_page(
    shared: &Shared,
    status: StatusCode,
    error: Option<&str>,
    keep: Option<String>,
) -> Response<Body> {
    let Some(nonce) = keep.or_else(|| shared.sessions.new_nonce()) else {
        return respond(
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain; charset=utf-8",
            String::from("no randomness for a sign-in form\n"),
        );
    };
    let mut response = shared.pages.render(
        "login.html",
        status,
        context! {
            title => "Sign in",
            nonce => &nonce,
            error => error,
            user => None::<String>,
            flash => None::<String>,
            oidc => shared.oidc.as_ref().map(|provider| text::escape(provider.issuer())),
            oidc_start => START_PATH,
        },
    );
    set_cookie(
        &mut response,
        cookie(LOGIN_COOKIE, &nonce, shared.guard.secure, None),
    );
    response
}

/// A sign-in's form (the token's, or the provider's answer), or the sign-in page saying it
/// could not be read (400).
async fn sign_in_form(
    shared: &Shared,
    request: Request<Incoming>,
) -> Result<Vec<(String, String)>, Response<Body>> {
    form(request).await.ok_or_else(|| {
        login_page(
            shared,
            StatusCode::BAD_REQUEST,
            Some("the form could not be read"),
            None,
        )
    })
}

async fn login(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let brought = cookie_values(request.headers(), LOGIN_COOKIE);
    let fields = match sign_in_form(shared, request).await {
        Ok(fields) => fields,
        Err(refused) => return refused,
    };
    // The form's nonce must be the one its cookie carries and one this console issued: a
    // sign-in form posted from another site has neither (login CSRF).
    let nonce = field(&fields, "nonce").unwrap_or_default();
    let nonce_ok = brought
        .iter()
        .any(|brought| super::session::same(brought.as_bytes(), nonce.as_bytes()))
        && shared.sessions.nonce_alive(nonce);
    if !nonce_ok {
        tracing::warn!("console: refused a sign-in whose form this console did not give");
        return login_page(
            shared,
            StatusCode::FORBIDDEN,
            Some("this sign-in form is not one this console gave, or it expired: sign in again"),
            None,
        );
    }
    let Some(user) = shared
        .sessions
        .user_of(field(&fields, "token").unwrap_or_default())
    else {
        tracing::warn!("console: refused a sign-in with a token that is not one of `listen.tokens`");
        return login_page(
            shared,
            StatusCode::UNAUTHORIZED,
            Some("that token is not one of the config's `listen.tokens`"),
            None,
        );
    };
    tracing::info!("console: `{}` signed in with a token", text::escape(&user));
    signed_in(shared, user, Vec::new(), "with a named token").await
}

/// A new session for `user` in `groups`, and the one answer that hands its key to the
/// page's script (see the module's contract, 5): the same for every way of signing in.
async fn signed_in(
    shared: &Shared,
    user: String,
    groups: Vec<String>,
    how: &'static str,
) -> Response<Body> {
    if !shared.sign_ins.within(&user, MAX_SIGN_INS_PER_MINUTE) {
        return login_page(
            shared,
            StatusCode::TOO_MANY_REQUESTS,
            Some("too many sign-ins of this user this minute; wait a minute"),
            None,
        );
    }
    // A sign-in that cannot be recorded is refused: the chain names who could answer.
    if !shared
        .record(
            &user,
            &groups,
            "sign-in",
            format!("signed in to the console {how}"),
            serde_json::Map::new(),
        )
        .await
    {
        return login_page(
            shared,
            StatusCode::SERVICE_UNAVAILABLE,
            Some("the sign-in cannot be recorded in the audit chain; try again when it can be written"),
            None,
        );
    }
    let shown_groups: Vec<String> = groups.iter().map(|group| text::escape(group)).collect();
    let Some(id) = shared.sessions.start(user.clone(), groups) else {
        return login_page(
            shared,
            StatusCode::SERVICE_UNAVAILABLE,
            Some("no randomness for a session"),
            None,
        );
    };
    let Some(key) = shared.sessions.get(&id).map(|session| session.key) else {
        return login_page(shared, StatusCode::SERVICE_UNAVAILABLE, Some("the session ended at once"), None);
    };
    // The one answer that carries the session's key: the page's script keeps it and goes on
    // to the held calls.
    let mut response = shared.pages.render(
        "signed-in.html",
        StatusCode::OK,
        context! { title => "Signed in", key => &key, name => text::escape(&user), name_groups => shown_groups, user => None::<String>, flash => None::<String> },
    );
    set_cookie(
        &mut response,
        cookie(SESSION_COOKIE, &id, shared.guard.secure, None),
    );
    set_cookie(
        &mut response,
        cookie(LOGIN_COOKIE, "", shared.guard.secure, Some(0)),
    );
    // After the session's own cookie: those planted on the console's paths, removed.
    for name in [SESSION_COOKIE, LOGIN_COOKIE] {
        for value in planted_cleared(name, shared.guard.secure) {
            set_cookie(&mut response, value);
        }
    }
    response
}

/// The provider's button was pressed: a new flow, and the page that hands it to the script
/// (kept in the console origin's storage) and sends the browser to the provider.
fn oidc_start(shared: &Shared) -> Response<Body> {
    let Some(provider) = &shared.oidc else {
        return not_found();
    };
    let secrets = shared.sessions.new_flow().and_then(|flow| {
        let secret = |what| shared.sessions.flow_secret(&flow, what);
        Some((secret("state")?, secret("nonce")?, secret("pkce")?, flow))
    });
    let Some((state, nonce, verifier, flow)) = secrets else {
        return login_page(
            shared,
            StatusCode::SERVICE_UNAVAILABLE,
            Some("no randomness for a sign-in"),
            None,
        );
    };
    let url = provider.authorization_url(&state, &nonce, &verifier);
    shared.pages.render(
        "oidc-start.html",
        StatusCode::OK,
        context! {
            title => "Signing in",
            flow => &flow,
            next => url.as_str(),
            issuer => text::escape(provider.issuer()),
            user => None::<String>,
            flash => None::<String>,
        },
    )
}

/// The callback page's script posted the provider's answer (`query`) with the flow it kept
/// (`flow`): checked, the code exchanged, the ID token checked, the session made.
async fn oidc_finish(shared: &Shared, request: Request<Incoming>) -> Response<Body> {
    let Some(provider) = &shared.oidc else {
        return not_found();
    };
    let fields = match sign_in_form(shared, request).await {
        Ok(fields) => fields,
        Err(refused) => return refused,
    };
    let flow = field(&fields, "flow").unwrap_or_default();
    let query = field(&fields, "query").unwrap_or_default();
    let finished = if shared.sessions.flow_alive(flow) {
        let secret = |what| shared.sessions.flow_secret(flow, what).unwrap_or_default();
        provider
            .finish(query, &secret("state"), &secret("nonce"), &secret("pkce"))
            .await
    } else {
        Err(SignInError::Flow)
    };
    match finished {
        Ok(signed_in_as) => {
            let shown: Vec<String> = signed_in_as.groups.iter().map(|g| text::escape(g)).collect();
            tracing::info!(
                "console: `{}` signed in with OpenID Connect (issuer `{}`), groups [{}]",
                text::escape(&signed_in_as.user),
                text::escape(provider.issuer()),
                shown.join(", ")
            );
            if !signed_in_as.left_out.is_empty() {
                tracing::warn!(
                    "console: of `{}`'s groups, left out: {}",
                    text::escape(&signed_in_as.user),
                    signed_in_as.left_out.join("; ")
                );
            }
            signed_in(
                shared,
                signed_in_as.user,
                signed_in_as.groups,
                "with OpenID Connect",
            )
            .await
        }
        Err(error) => {
            // Every part of the message that the provider or the browser wrote is escaped
            // where it is made (`super::oidc`).
            tracing::warn!("console: an OpenID Connect sign-in was refused: {error}");
            // Never 401: to the page's script that means "the session's key is stale".
            let status = match error {
                SignInError::Flow | SignInError::State(_) | SignInError::Provider(_) => {
                    StatusCode::FORBIDDEN
                }
                SignInError::Exchange(_) | SignInError::IdToken(_) => StatusCode::BAD_GATEWAY,
            };
            login_page(shared, status, Some(&format!("Sign-in failed: {error}")), None)
        }
    }
}

/// The session's groups as a page shows them: escaped.
fn groups_shown(session: &Session) -> Vec<String> {
    session.groups.iter().map(|group| text::escape(group)).collect()
}

pub(super) fn error_page(
    shared: &Shared,
    session: &Session,
    status: StatusCode,
    error: &str,
) -> Response<Body> {
    shared.pages.render(
        "error.html",
        status,
        context! {
            title => status.canonical_reason().unwrap_or("Refused"),
            error => error,
            user => text::escape(&session.user),
            groups => groups_shown(session),
            flash => None::<String>,
        },
    )
}

/// A held call as the page shows it: every string escaped.
#[derive(Debug, Serialize)]
struct HeldView {
    call_id: String,
    tool: String,
    server: String,
    upstream_tool: String,
    effect: String,
    reason: String,
    principal: String,
    session: String,
    held_at: String,
    arguments_sha256: String,
    description_sha256: String,
    input_schema_sha256: String,
    arguments: String,
    result: Option<String>,
    waiting: bool,
    problem: Option<String>,
}

impl HeldView {
    fn of(entry: &PendingEntry) -> HeldView {
        let r = &entry.request;
        HeldView {
            call_id: text::escape(&r.call_id),
            tool: text::escape(&r.exposed_tool),
            server: text::escape(&r.server),
            upstream_tool: text::escape(&r.tool),
            effect: text::escape(&r.effect),
            reason: text::escape(&r.reason),
            principal: text::escape(&r.principal),
            session: text::escape(&r.session),
            held_at: utc(r.time_ms),
            arguments_sha256: text::escape(&r.arguments_sha256),
            description_sha256: text::escape(&r.description_sha256),
            input_schema_sha256: text::escape(&r.input_schema_sha256),
            arguments: display_arguments(&r.arguments),
            result: r.result.as_deref().map(display_result),
            waiting: entry.waiting,
            problem: entry.problem.as_deref().map(text::escape),
        }
    }
}

/// The held calls: the whole page, or (`shown` given) the list alone for the page's script,
/// which sends the calls it shows; when they are still the held calls, 204 and nothing
/// rendered.
async fn approvals_page(
    shared: &Shared,
    session: &Session,
    shown: Option<Option<String>>,
) -> Response<Body> {
    let entries = match shared.store.held().await {
        Ok(entries) => entries,
        Err(error) => {
            let message = format!("the approvals queue cannot be read: {}", text::escape(&error));
            return error_page(shared, session, StatusCode::INTERNAL_SERVER_ERROR, &message);
        }
    };
    // With approvers named, a user sees only the calls they may answer.
    let who = answerer(session);
    let held: Vec<HeldView> = entries
        .iter()
        .filter(|entry| shared.approvers.may_answer(&who, &held(&entry.request)).is_ok())
        .map(HeldView::of)
        .collect();
    // What the page's script compares to know the list changed: the calls and their states.
    let ids = held
        .iter()
        .map(|h| format!("{}:{}:{}", h.call_id, h.waiting, h.problem.is_some()))
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(Some(shown)) = &shown
        && *shown == ids
    {
        let mut unchanged = respond(StatusCode::NO_CONTENT, "text/plain; charset=utf-8", String::new());
        unchanged.headers_mut().remove(header::CONTENT_TYPE);
        return unchanged;
    }
    let values = context! {
        title => "Held calls",
        held => held,
        ids => ids,
        user => text::escape(&session.user),
        groups => groups_shown(session),
        flash => &session.flash,
        interval_ms => u64::try_from(POLL_INTERVAL.as_millis()).unwrap_or(1000),
    };
    let name = if shown.is_some() { "held.html" } else { "approvals.html" };
    shared.pages.render(name, StatusCode::OK, values)
}

async fn answer(
    shared: &Shared,
    id: &str,
    session: &Session,
    fields: &[(String, String)],
) -> Response<Body> {
    let call_id = field(fields, "call").unwrap_or_default().to_owned();
    let approve = match field(fields, "verdict") {
        Some("approve") => true,
        Some("deny") => false,
        _ => {
            return error_page(
                shared,
                session,
                StatusCode::BAD_REQUEST,
                "the answer is neither approve nor deny",
            );
        }
    };
    let reason = field(fields, "reason")
        .map(str::trim)
        .filter(|reason| !reason.is_empty() && !approve)
        // A console user's text reaches the client in the refusal: shown as text there too.
        .map(|reason| text::escape(&reason.chars().take(MAX_REASON_CHARS).collect::<String>()))
        .or_else(|| {
            (!approve).then(|| {
                format!(
                    "denied in the console by `{}`",
                    text::escape(&session.user)
                )
            })
        });
    let by = answerer(session);
    let answered = shared
        .store
        .answer(&call_id, approve, reason, by, &shared.approvers)
        .await;
    let shown = text::escape(&call_id);
    let message = match answered {
        Ok(by) => {
            tracing::info!(
                "console: call `{shown}` {} by {by}",
                if approve { "approved" } else { "denied" }
            );
            if approve {
                format!("approved call `{shown}` (once, for its arguments) as {by}")
            } else {
                format!("denied call `{shown}` as {by}")
            }
        }
        Err(refused) => {
            let (status, message) = match refused {
                AnswerRefused::Conflict(message) => (StatusCode::CONFLICT, message),
                AnswerRefused::BadRequest(message) => (StatusCode::BAD_REQUEST, message),
                AnswerRefused::Failed(message) => (StatusCode::INTERNAL_SERVER_ERROR, message),
                AnswerRefused::NotAnApprover { message, reason } => {
                    let mut detail = serde_json::Map::new();
                    detail.insert(String::from("call_id"), call_id.clone().into());
                    detail.insert(String::from("approve"), approve.into());
                    shared
                        .record_refusal(
                            &session.user,
                            &session.groups,
                            "answer-refused",
                            reason,
                            detail,
                        )
                        .await;
                    (StatusCode::FORBIDDEN, message)
                }
            };
            return error_page(shared, session, status, &text::escape(&message));
        }
    };
    shared.sessions.flash(id, message);
    redirect("/approvals")
}

/// The chain's state as last checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChainState {
    /// When, UTC.
    pub checked_at: String,
    /// What was found, when intact (records, and whether a head matched).
    pub summary: String,
    /// Where it breaks or how it differs from its head, escaped; `None` when intact.
    pub problem: Option<String>,
}

impl ChainState {
    pub(super) fn unchecked() -> ChainState {
        ChainState {
            checked_at: String::from("not yet"),
            summary: String::from("not checked yet"),
            problem: None,
        }
    }
}

/// An audit record as the page shows it: every string escaped.
#[derive(Debug, Serialize)]
struct RowView {
    time: String,
    seq: u64,
    kind: String,
    call_id: String,
    call_link: Option<String>,
    principal: String,
    tool: String,
    decision: &'static str,
    reason: String,
    detail: String,
}

/// The filters as given, shown back in the form.
#[derive(Debug, Default, Serialize)]
struct FilterView {
    since: String,
    until: String,
    server: String,
    tool: String,
    principal: String,
    decision: String,
    call: String,
}

async fn audit_page(shared: &Shared, session: &Session, query: Option<&str>) -> Response<Body> {
    let mut given = FilterView::default();
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        let value = value.trim().to_owned();
        match key.as_ref() {
            "since" => given.since = value,
            "until" => given.until = value,
            "server" => given.server = value,
            "tool" => given.tool = value,
            "principal" => given.principal = value,
            "decision" => given.decision = value,
            "call" => given.call = value,
            _ => {}
        }
    }
    let (filter, error) = match filter_of(&given) {
        Ok(filter) => (filter, None),
        Err(error) => (
            Filter {
                // Nothing matches a filter that could not be read: no record is shown as if
                // it passed it.
                since_ms: Some(u64::MAX),
                ..Filter::default()
            },
            Some(text::escape(&error)),
        ),
    };
    let (rows, matched, read, error) = match shared.store.audit(filter).await {
        Ok(Some(shown)) => {
            // With approvers named, a user reads the records of the servers they answer for.
            let who = answerer(session);
            let readable: Vec<_> = shown
                .records
                .iter()
                .filter(|(record, _)| shared.approvers.may_read(&who, record.event.server.as_deref()))
                .collect();
            let matched = readable.len();
            let rows: Vec<RowView> = readable
                .into_iter()
                .rev()
                .take(MAX_AUDIT_ROWS)
                .map(|(record, raw)| row(record, raw))
                .collect();
            (rows, matched, shown.read, error)
        }
        Ok(None) => (Vec::new(), 0, 0, error),
        Err(e) => (Vec::new(), 0, 0, Some(text::escape(&e))),
    };
    let chain = shared
        .chain
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    shared.pages.render(
        "audit.html",
        StatusCode::OK,
        context! {
            title => "Audit",
            chain => chain,
            chain_interval_s => CHAIN_CHECK_INTERVAL.as_secs(),
            f => given,
            rows => rows,
            matched => matched,
            read => read,
            error => error,
            user => text::escape(&session.user),
            groups => groups_shown(session),
            flash => &session.flash,
        },
    )
}

/// The filters of `toolward audit show` from the form's values.
fn filter_of(given: &FilterView) -> Result<Filter, String> {
    let now = crate::ids::now_ms();
    let time = |t: &str| {
        (!t.is_empty())
            .then(|| parse_time(t, now).map_err(|e| e.to_string()))
            .transpose()
    };
    let text_of = |t: &str| (!t.is_empty()).then(|| t.to_owned());
    let decision = match given.decision.as_str() {
        "" => None,
        "allow" => Some(AuditDecision::Allow),
        "deny" => Some(AuditDecision::Deny),
        "hold" => Some(AuditDecision::Hold),
        other => return Err(format!("decision `{other}`: expected allow, deny or hold")),
    };
    Ok(Filter {
        since_ms: time(&given.since)?,
        until_ms: time(&given.until)?,
        server: text_of(&given.server),
        tool: text_of(&given.tool),
        principal: text_of(&given.principal),
        decision,
        call_id: text_of(&given.call),
    })
}

/// `detail` cut to [`MAX_DETAIL_BYTES`] on a character boundary, saying what was left out.
fn cut_detail(mut detail: String, seq: u64) -> String {
    if detail.len() <= MAX_DETAIL_BYTES {
        return detail;
    }
    let more = detail.len() - detail.floor_char_boundary(MAX_DETAIL_BYTES);
    detail.truncate(detail.floor_char_boundary(MAX_DETAIL_BYTES));
    detail.push_str(&format!(
        "\n… {more} bytes more: `toolward audit show` prints record {seq} whole"
    ));
    detail
}

fn row(record: &crate::audit::AuditRecord, raw: &serde_json::Value) -> RowView {
    let e = &record.event;
    let shown = |v: &Option<String>| text::escape(v.as_deref().unwrap_or("-"));
    // JSON escapes control characters in strings; the rest of the hidden ones are escaped
    // line by line (a pretty JSON string never spans lines).
    let detail = serde_json::to_string_pretty(raw)
        .unwrap_or_default()
        .lines()
        .map(text::escape)
        .collect::<Vec<_>>()
        .join("\n");
    let detail = cut_detail(detail, record.seq);
    let call_link = e
        .call_id
        .as_deref()
        .filter(|id| !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric()))
        .map(|id| format!("/audit?call={id}"));
    RowView {
        time: utc(record.time),
        seq: record.seq,
        kind: text::escape(&e.kind.to_string()),
        call_id: shown(&e.call_id),
        call_link,
        principal: shown(&e.principal),
        tool: shown(&e.tool),
        decision: e.decision.map_or("-", |d| match d {
            AuditDecision::Allow => "allow",
            AuditDecision::Deny => "deny",
            AuditDecision::Hold => "hold",
        }),
        reason: shown(&e.reason),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_escapes_what_a_server_or_caller_wrote() {
        let pages = Pages::new().unwrap();
        let held = vec![HeldView {
            call_id: String::from("01KCALL"),
            tool: text::escape("fs__<script>alert(1)</script>"),
            server: String::from("fs"),
            upstream_tool: String::from("t"),
            effect: String::from("destructive"),
            reason: text::escape("\u{202e}evil\" onmouseover=\"x"),
            principal: String::from("ci"),
            session: String::from("s"),
            held_at: String::from("now"),
            arguments_sha256: String::from("a"),
            description_sha256: String::from("d"),
            input_schema_sha256: String::from("i"),
            arguments: display_arguments(r#"{"path":"<img src=x onerror=alert(1)>"}"#),
            result: None,
            waiting: true,
            problem: None,
        }];
        let response = pages.render(
            "held.html",
            StatusCode::OK,
            context! { held => held, ids => "x" },
        );
        let body = futures::executor::block_on(response.into_body().collect())
            .unwrap()
            .to_bytes();
        let html = String::from_utf8(body.to_vec()).unwrap();
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("<img"), "{html}");
        assert!(html.contains("&lt;script&gt;"), "{html}");
        assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"), "{html}");
        // The bidirectional override is shown as its escape, not applied.
        assert!(html.contains("\\u{202E}evil&quot; onmouseover=&quot;x"), "{html}");
    }

    #[test]
    fn a_record_detail_is_cut_on_a_character_boundary_saying_how_much_more() {
        let short = String::from("{\"seq\": 1}");
        assert_eq!(cut_detail(short.clone(), 1), short);
        let long = "é".repeat(MAX_DETAIL_BYTES);
        let cut = cut_detail(long, 7);
        let (kept, note) = cut.split_once('\n').unwrap();
        assert_eq!(kept.len(), MAX_DETAIL_BYTES);
        assert_eq!(
            note,
            format!("… {MAX_DETAIL_BYTES} bytes more: `toolward audit show` prints record 7 whole")
        );
    }

    #[test]
    fn every_cookie_of_a_name_is_read_so_a_planted_one_hides_nothing() {
        let mut headers = http::HeaderMap::new();
        headers.insert(header::COOKIE, "a=1; toolward_console=planted".parse().unwrap());
        headers.append(header::COOKIE, "toolward_console=ours".parse().unwrap());
        assert_eq!(cookie_values(&headers, SESSION_COOKIE), ["planted", "ours"]);
        assert!(planted_cleared(SESSION_COOKIE, false)
            .iter()
            .any(|c| c.starts_with("toolward_console=; Path=/approvals;") && c.ends_with("Max-Age=0")));
    }

    #[test]
    fn cookies_are_http_only_and_same_site_strict_and_secure_under_tls() {
        let plain = cookie(SESSION_COOKIE, "id", false, None);
        assert_eq!(plain, "toolward_console=id; Path=/; HttpOnly; SameSite=Strict");
        assert!(cookie(SESSION_COOKIE, "id", true, None).ends_with("; Secure"));
    }
}
