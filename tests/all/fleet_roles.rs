//! The roles of docs/fleet.md against the real PostgreSQL (`TOOLWARD_TEST_DATABASE_URL`, a
//! superuser's URL; see `store_contract` for when these fail or skip without it).
//!
//! Each test makes a fresh database, runs the docs' role block (read from docs/fleet.md, so
//! the doc is what is tested), migrates as `toolward_owner` through the binary unless it
//! tests the refusal of an unmigrated database, and then acts as each role: through the
//! binary for what toolward does, and through a connection of the role's own for what the
//! role must be refused.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolward::store::postgres::PgStore;

use crate::fleet::{Fleet, Gateway, call};
use crate::store_contract::test_database_url;
use crate::support::toolward_binary;

/// The login roles the docs' block creates, and their passwords there.
const OWNER: (&str, &str) = ("toolward_owner", "OWNER-PASSWORD");
const GATEWAY: (&str, &str) = ("toolward_gw1", "GW1-PASSWORD");
const APPROVER: (&str, &str) = ("toolward_alice", "ALICE-PASSWORD");
const AUDITOR: (&str, &str) = ("toolward_audit1", "AUDIT1-PASSWORD");
const CONSOLE: (&str, &str) = ("toolward_console1", "CONSOLE1-PASSWORD");

/// Roles belong to the cluster, not to a database: the tests of this binary create them one
/// at a time (a role made by an earlier run, or by another test, is kept).
static ROLES_MADE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The SQL block of docs/fleet.md whose first line is `first_line`, as it is written there.
fn docs_block(first_line: &str) -> String {
    let docs = std::fs::read_to_string(crate::support::repo().join("docs/fleet.md")).unwrap();
    let start = docs
        .find(&format!("```sql\n{first_line}"))
        .unwrap_or_else(|| panic!("docs/fleet.md has no block starting `{first_line}`"));
    let block = &docs[start + "```sql\n".len()..];
    block[..block.find("```").unwrap()].to_owned()
}

/// The block that creates the roles (the one the operator runs as a superuser).
const ROLE_BLOCK: &str = "-- the owner, and the four groups";

/// The block that hands a fleet's tables from its old gateway role to the owner.
const UPGRADE_BLOCK: &str = "-- a fleet set up before `store migrate`";

/// A gateway login role of a fleet set up before `store migrate`, which made the tables.
const OLD_GATEWAY: (&str, &str) = ("toolward_gw_before_roles", "OLD-PASSWORD");

/// A fresh database with the roles of docs/fleet.md, not migrated yet.
struct RoleDatabase {
    /// `postgres://` up to the port, without a user.
    server: String,
    name: String,
    admin_url: String,
    fleet: Fleet,
}

impl RoleDatabase {
    async fn new(test: &str) -> Option<RoleDatabase> {
        let admin_url = test_database_url(test)?;
        let admin = PgStore::new(&admin_url).unwrap().pool().unwrap();
        let name = format!(
            "toolward_roles_{}",
            toolward::ids::new_ulid().to_lowercase()
        );
        admin
            .get()
            .await
            .unwrap()
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let (base, _) = admin_url.rsplit_once('/').unwrap();
        let host = base.rsplit_once('@').map_or(base, |(_, host)| host);
        let server = format!("postgres://{}", host.trim_start_matches("postgres://"));
        let (user_part, _) = admin_url.rsplit_once('@').unwrap();
        let fleet = Fleet::unmigrated(&format!("{base}/{name}"), "s").await;
        let db = RoleDatabase {
            admin_url: format!("{user_part}@{host}/{name}"),
            server,
            name,
            fleet,
        };
        db.run_docs_role_block().await;
        Some(db)
    }

    /// Runs the docs' role block as the superuser, on this database: each statement as
    /// written, the database's name put in for `toolward`.
    async fn run_docs_role_block(&self) {
        self.run_as_superuser(&docs_block(ROLE_BLOCK)).await;
    }

    /// Runs each statement of `block` as the superuser, on this database, the database's name
    /// put in for `toolward`; a role made by an earlier run or test is kept (roles outlive
    /// databases).
    async fn run_as_superuser(&self, block: &str) {
        let _one_at_a_time = ROLES_MADE.lock().await;
        let client = connect(&self.admin_url).await;
        let block = block.replace(
            "ON DATABASE toolward ",
            &format!("ON DATABASE {} ", self.name),
        );
        let statements = block
            .lines()
            .filter(|line| !line.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        for statement in statements
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            match client.batch_execute(statement).await {
                Ok(()) => {}
                Err(e)
                    if statement.starts_with("CREATE ROLE")
                        && e.code().map(|c| c.code()) == Some(DUPLICATE_OBJECT) => {}
                Err(e) => panic!("`{statement}` failed: {e}"),
            }
        }
    }

    /// The URL of this database as `role`.
    fn url(&self, (role, password): (&str, &str)) -> String {
        let host = self.server.trim_start_matches("postgres://");
        format!("postgres://{role}:{password}@{host}/{}", self.name)
    }

    /// A config of the fleet's, on this database as `role`.
    fn config(&self, role: (&str, &str)) -> std::path::PathBuf {
        self.fleet.config_for(role.0, &self.url(role))
    }

    /// A connection as `role`, to try what it must be refused.
    async fn connect(&self, role: (&str, &str)) -> deadpool_postgres::Object {
        connect(&self.url(role)).await
    }

    /// `toolward store migrate` as the owner, through the binary.
    fn migrate(&self) -> String {
        self.migrate_as(OWNER)
    }

    /// `toolward store migrate` as `role`, through the binary.
    fn migrate_as(&self, role: (&str, &str)) -> String {
        let (ok, stdout, stderr) = toolward(&self.config(role), &["store", "migrate"]);
        assert!(ok, "migrate as `{}` failed: {stdout}{stderr}", role.0);
        stdout
    }

    async fn drop_database(self) {
        let admin = PgStore::new(&self.admin_url.replace(&self.name, "toolward"))
            .unwrap()
            .pool()
            .unwrap();
        let _ = admin
            .get()
            .await
            .unwrap()
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await;
    }
}

/// SQLSTATE `insufficient_privilege`: what every refused statement must fail with.
const INSUFFICIENT_PRIVILEGE: &str = "42501";

/// SQLSTATE `duplicate_object`: a role that exists already.
const DUPLICATE_OBJECT: &str = "42710";

/// One connection to `url` (through toolward's store, so with its TLS settings).
async fn connect(url: &str) -> deadpool_postgres::Object {
    PgStore::new(url)
        .unwrap()
        .pool()
        .unwrap()
        .get()
        .await
        .unwrap()
}

/// Runs `toolward ARGS --config CONFIG`: whether it succeeded, its stdout and its stderr.
fn toolward(config: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(toolward_binary().unwrap())
        .args(args)
        .arg("--config")
        .arg(config)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Asserts that `statement`, run as the role of `client`, is refused for lack of privilege.
async fn assert_denied(client: &deadpool_postgres::Object, role: &str, statement: &str) {
    match client.batch_execute(statement).await {
        Ok(()) => panic!("`{role}` was allowed `{statement}`"),
        Err(e) => assert_eq!(
            e.code().map(|c| c.code()),
            Some(INSUFFICIENT_PRIVILEGE),
            "`{role}`: `{statement}`: {e}"
        ),
    }
}

/// Every record of the database's chain, read as the auditor (`audit export`).
fn exported(db: &RoleDatabase) -> Vec<Value> {
    let out = db.fleet.dir.path().join("export.jsonl");
    let (ok, stdout, stderr) = toolward(
        &db.config(AUDITOR),
        &["audit", "export", "--out", out.to_str().unwrap()],
    );
    assert!(ok, "audit export as the auditor failed: {stdout}{stderr}");
    std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_as_the_owner_creates_the_schema_once_and_says_what_it_did() {
    let Some(db) = RoleDatabase::new("migrate as the owner").await else {
        return;
    };
    let first = db.migrate();
    assert!(
        first.contains("created the schema, version 7")
            && first.contains("granted the rights of docs/fleet.md to `toolward_gateway`, `toolward_approver`, `toolward_auditor`")
            && first.contains("schema version 7")
            && !first.contains("drift:"),
        "{first}"
    );
    let again = db.migrate();
    assert!(
        again.contains("schema version 7 already; nothing to create")
            && !again.contains("made the fleet's"),
        "{again}"
    );
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_role_calls_and_is_audited_but_cannot_delete_or_update_audit_rows() {
    let Some(db) = RoleDatabase::new("gateway role").await else {
        return;
    };
    db.migrate();
    let (ok, stdout, stderr) = toolward(
        &db.config(GATEWAY),
        &["call", "s__echo", "--args", r#"{"as": "gateway"}"#],
    );
    assert!(ok, "a call as the gateway failed: {stdout}{stderr}");
    let records = exported(&db);
    let kinds: Vec<&str> = records
        .iter()
        .filter(|r| r["tool"] == "s__echo")
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["call-received", "decision", "forwarded", "result"],
        "{records:?}"
    );

    let gateway = db.connect(GATEWAY).await;
    for statement in [
        "DELETE FROM toolward_audit",
        "UPDATE toolward_audit SET line = line",
        "TRUNCATE toolward_audit",
        "DELETE FROM toolward_approvals",
        "UPDATE toolward_approvals SET answerer = 'gw'",
        "UPDATE toolward_schema SET version = 3",
        "TRUNCATE toolward_labels",
        "CREATE TABLE toolward_more (x int)",
    ] {
        assert_denied(&gateway, GATEWAY.0, statement).await;
    }
    let (ok, stdout, stderr) = toolward(&db.config(AUDITOR), &["audit", "verify"]);
    assert!(ok && stdout.contains("chain intact"), "{stdout}{stderr}");
    drop(gateway);
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_approver_role_answers_a_held_call_but_cannot_insert_audit_rows() {
    let Some(db) = RoleDatabase::new("approver role").await else {
        return;
    };
    db.migrate();
    let gateway = Gateway::start(&db.config(GATEWAY));
    let client = gateway.client().await;
    let run = toolward::ids::new_ulid();
    let held = tokio::spawn({
        let run = run.clone();
        async move { call(&client, "s__write", json!({"run": run})).await }
    });
    let approver = db.config(APPROVER);
    let deadline = Instant::now() + Duration::from_secs(20);
    let call_id = loop {
        let (ok, stdout, stderr) = toolward(&approver, &["approvals", "list", "--json"]);
        assert!(
            ok,
            "approvals list as the approver failed: {stdout}{stderr}"
        );
        let listed: Vec<Value> = serde_json::from_str(&stdout).unwrap();
        if let Some(entry) = listed
            .iter()
            .find(|e| e["arguments"].as_str().is_some_and(|a| a.contains(&run)))
        {
            break entry["call_id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "the held call was never listed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (ok, stdout, stderr) = toolward(&approver, &["approvals", "approve", &call_id]);
    assert!(ok, "approve as the approver failed: {stdout}{stderr}");
    let result = held.await.unwrap().unwrap();
    assert_eq!(result["isError"], json!(false), "{result}");
    drop(gateway);
    assert!(
        exported(&db)
            .iter()
            .any(|r| r["kind"] == "approval-answered" && r["call_id"] == json!(call_id)),
        "the answer is not on record"
    );

    let approver = db.connect(APPROVER).await;
    for statement in [
        "INSERT INTO toolward_audit (seq, line) VALUES (1000000, '\\x7b7d')",
        "UPDATE toolward_audit_head SET next_seq = 0",
        "SELECT * FROM toolward_audit",
        "SELECT * FROM toolward_keys",
        "SELECT * FROM toolward_labels",
        "SELECT * FROM toolward_oauth_grants",
        "UPDATE toolward_approvals SET request = '{}'",
        "INSERT INTO toolward_approvals (call_id, request, held_by, held_at_ms, expires_at_ms) VALUES ('x', '{}', 'x', 0, 0)",
    ] {
        assert_denied(&approver, APPROVER.0, statement).await;
    }
    drop(approver);
    db.drop_database().await;
}

/// The console's role does what a fleet's console does (reads the gateways' rows a running
/// gateway wrote, answers a held call with its channel and the user's groups, appends its own
/// record at the head) and nothing a gateway, an owner or another reader alone may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_role_reads_the_chain_and_gateways_and_answers_as_its_user_but_writes_nothing_else()
 {
    use toolward::approval::Channel;
    use toolward::identity::{AnsweredBy, Approvers};
    let Some(db) = RoleDatabase::new("console role").await else {
        return;
    };
    db.migrate();
    let console = PgStore::new(&db.url(CONSOLE)).unwrap();
    // A running gateway publishes its row; the console's role reads it, live.
    let gateway = Gateway::start(&db.config(GATEWAY));
    let gateways = toolward::store::postgres::PgGateways::open(&console)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (published, _) = toolward::gateways::read_database(&gateways).await.unwrap();
        if published
            .iter()
            .any(|p| p.live && p.state.servers.iter().any(|s| s.server == "s"))
        {
            break;
        }
        assert!(Instant::now() < deadline, "the gateway's row never showed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(gateway);

    // An answer as a console user: the row keeps the channel and the groups.
    let owner = db.connect(GATEWAY).await;
    let call_id = toolward::ids::new_ulid();
    hold(&owner, &call_id).await;
    let approvals =
        toolward::store::postgres::PgApprovals::new(&console, Duration::from_secs(30)).unwrap();
    let by = AnsweredBy::console_user("carol", &[String::from("sre")]);
    approvals
        .answer_as(&call_id, true, None, by, &Approvers::default())
        .await
        .unwrap();
    let row = owner
        .query_one(
            "SELECT state, answerer, answered_through, answerer_groups FROM toolward_approvals WHERE call_id = $1",
            &[&call_id],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "approved");
    assert_eq!(row.get::<_, Option<String>>(1).as_deref(), Some("carol"));
    assert_eq!(
        row.get::<_, Option<String>>(2).as_deref(),
        Some(Channel::Console.as_str())
    );
    assert_eq!(
        row.get::<_, Option<Vec<String>>>(3),
        Some(vec![String::from("sre")])
    );

    // It reads the chain and its head, as the audit page does.
    let mut reader = toolward::store::postgres::audit::Reader::open(&console)
        .await
        .unwrap();
    let read = reader.read_new().await.unwrap();
    assert!(read.first_break.is_none() && read.head_problem.is_none());

    let client = db.connect(CONSOLE).await;
    for statement in [
        // The chain is the gateways' to append to: with the head's `UPDATE`, outside attacks
        // stopped every call of the fleet with this role (the head moved back, or to the
        // largest `bigint`) and wrote a forged answer into the chain.
        "UPDATE toolward_audit_head SET next_seq = next_seq - 1",
        "UPDATE toolward_audit_head SET last_hash = 'x'",
        "INSERT INTO toolward_audit (seq, line) SELECT next_seq, convert_to('{\"kind\":\"approval-answered\"}', 'UTF8') FROM toolward_audit_head",
        "UPDATE toolward_audit SET line = '\\x7b7d'",
        "DELETE FROM toolward_audit",
        "INSERT INTO toolward_gateways (id, state, updated_at_ms) VALUES ('x', '{}', 0)",
        "DELETE FROM toolward_gateways",
        "SELECT * FROM toolward_keys",
        "SELECT * FROM toolward_labels",
        "SELECT * FROM toolward_oauth_grants",
        "UPDATE toolward_approvals SET request = '{}'",
        "INSERT INTO toolward_approvals (call_id, request, held_by, held_at_ms, expires_at_ms) VALUES ('x', '{}', 'x', 0, 0)",
        // Last: it leaves the transaction it opens aborted.
        "BEGIN; LOCK TABLE toolward_audit_head IN ACCESS EXCLUSIVE MODE",
    ] {
        assert_denied(&client, CONSOLE.0, statement).await;
    }
    client.batch_execute("ROLLBACK").await.unwrap();
    drop((client, owner));

    // A gateway's row is its writer's, stamped by the database's clock: another gateway's
    // login cannot rewrite it, and a row dated ahead is dated now.
    let other = db.connect(GATEWAY).await;
    other
        .execute(
            "INSERT INTO toolward_gateways (id, state, updated_at_ms) VALUES ('planted', '{}', 9000000000000)",
            &[],
        )
        .await
        .unwrap();
    let stamped: i64 = other
        .query_one(
            "SELECT updated_at_ms FROM toolward_gateways WHERE id = 'planted'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let now = i64::try_from(toolward::ids::now_ms()).unwrap();
    assert!((stamped - now).abs() < 60_000, "{stamped} against {now}");
    let admin = connect(&db.admin_url).await;
    admin
        .batch_execute(
            "CREATE ROLE toolward_gw2 LOGIN PASSWORD 'GW2-PASSWORD' IN ROLE toolward_gateway",
        )
        .await
        .or_else(|e| {
            (e.code().map(|c| c.code()) == Some(DUPLICATE_OBJECT))
                .then_some(())
                .ok_or(e)
        })
        .unwrap();
    let second = db.connect(("toolward_gw2", "GW2-PASSWORD")).await;
    for statement in [
        "UPDATE toolward_gateways SET state = '{\"servers\": []}' WHERE id = 'planted'",
        "DELETE FROM toolward_gateways WHERE id = 'planted'",
        // As the group role, it is still the same login: no second writer.
        "SET ROLE toolward_gateway; UPDATE toolward_gateways SET state = '{}' WHERE id = 'planted'",
    ] {
        assert_denied(&second, "toolward_gw2", statement).await;
    }
    second.batch_execute("RESET ROLE").await.unwrap();
    // A gateway's role moves the head, but never back and never past the last record plus
    // one: at the largest `bigint`, no append could follow it.
    for statement in [
        "UPDATE toolward_audit_head SET next_seq = 9223372036854775807",
        "UPDATE toolward_audit_head SET next_seq = next_seq - 1",
    ] {
        assert_denied(&other, GATEWAY.0, statement).await;
    }

    // Records past the head (the head moved back by someone who first dropped the trigger,
    // which only the owner can) are found by `audit verify`, though the chain up to the head
    // verifies.
    admin
        .batch_execute(
            "ALTER TABLE toolward_audit_head DISABLE TRIGGER toolward_audit_head_forward; \
             UPDATE toolward_audit_head SET next_seq = next_seq - 1; \
             ALTER TABLE toolward_audit_head ENABLE TRIGGER toolward_audit_head_forward",
        )
        .await
        .unwrap();
    let (ok, stdout, stderr) = toolward(&db.config(AUDITOR), &["audit", "verify"]);
    assert!(
        !ok && stderr.contains("records are at or past the head row"),
        "{stdout}{stderr}"
    );
    drop((other, second, admin));
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auditor_role_verifies_shows_and_tails_the_database_chain_but_cannot_write_anything() {
    let Some(db) = RoleDatabase::new("auditor role").await else {
        return;
    };
    db.migrate();
    let (ok, stdout, stderr) = toolward(
        &db.config(GATEWAY),
        &["call", "s__echo", "--args", r#"{"as": "auditor"}"#],
    );
    assert!(ok, "a call as the gateway failed: {stdout}{stderr}");
    let auditor = db.config(AUDITOR);
    let (ok, stdout, stderr) = toolward(&auditor, &["audit", "verify"]);
    assert!(
        ok && stdout.contains("chain intact") && stdout.contains(": matches"),
        "{stdout}{stderr}"
    );
    // `show` and `tail` read the database the config names, not an `audit.jsonl` beside it.
    let (ok, stdout, stderr) = toolward(&auditor, &["audit", "show", "--decision", "allow"]);
    assert!(ok, "audit show as the auditor failed: {stdout}{stderr}");
    assert!(
        stdout.contains("s__echo") && stdout.contains(" records match"),
        "{stdout}{stderr}"
    );
    let records = exported(&db);
    let (ok, stdout, stderr) = toolward(&auditor, &["audit", "tail", "-n", "1", "--json"]);
    assert!(ok, "audit tail as the auditor failed: {stdout}{stderr}");
    let last: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(last, records[records.len() - 1], "{stdout}");

    let auditor = db.connect(AUDITOR).await;
    for statement in [
        "INSERT INTO toolward_audit (seq, line) VALUES (1000000, '\\x7b7d')",
        "DELETE FROM toolward_audit",
        "UPDATE toolward_audit_head SET next_seq = 0",
        "UPDATE toolward_approvals SET state = 'approved'",
        "INSERT INTO toolward_request_states (call_id, expires_ms) VALUES ('x', 0)",
        "DELETE FROM toolward_facts",
        "UPDATE toolward_schema SET version = 3",
        "SELECT * FROM toolward_keys",
        "SELECT * FROM toolward_labels",
        "SELECT * FROM toolward_oauth_grants",
        "CREATE TABLE toolward_more (x int)",
    ] {
        assert_denied(&auditor, AUDITOR.0, statement).await;
    }
    drop(auditor);
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_on_an_unmigrated_database_refuses_naming_store_migrate_and_creates_nothing() {
    let Some(db) = RoleDatabase::new("unmigrated").await else {
        return;
    };
    let config = db.config(GATEWAY);
    let (ok, stdout, stderr) = toolward(&config, &["call", "s__echo"]);
    assert!(!ok, "a call on an unmigrated database succeeded: {stdout}");
    let expected = format!(
        "PostgreSQL store `{}/{}`: holds no toolward schema, and this toolward needs version 7: run `toolward store migrate --config {}` as the role that owns the tables",
        db.server,
        db.name,
        config.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(
        !stderr.contains(GATEWAY.1),
        "the password was printed: {stderr}"
    );
    // The auditor and the approver refuse the same way.
    for (role, args) in [
        (AUDITOR, &["audit", "verify"][..]),
        (APPROVER, &["approvals", "list"][..]),
    ] {
        let (ok, stdout, stderr) = toolward(&db.config(role), args);
        assert!(
            !ok && stderr.contains("run `toolward store migrate --config"),
            "{}: {stdout}{stderr}",
            role.0
        );
    }
    let owner = db.connect(OWNER).await;
    let tables: i64 = owner
        .query_one(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'toolward%'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(tables, 0, "a refused open created tables");
    drop(owner);
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_docs_upgrade_block_takes_the_tables_from_a_gateway_that_made_them_and_it_keeps_calling()
 {
    let Some(db) = RoleDatabase::new("upgrade from gateway-owned tables").await else {
        return;
    };
    // The layout before `store migrate`: the gateway's login role made (and owns) the tables,
    // and was the only role beside the schema's owner that could create in it.
    db.run_as_superuser(&format!(
        "CREATE ROLE {role} LOGIN PASSWORD '{password}'; \
         GRANT CONNECT ON DATABASE toolward TO {role}; \
         GRANT USAGE, CREATE ON SCHEMA public TO {role}; \
         REVOKE CREATE ON SCHEMA public FROM {owner}",
        role = OLD_GATEWAY.0,
        password = OLD_GATEWAY.1,
        owner = OWNER.0,
    ))
    .await;
    db.migrate_as(OLD_GATEWAY);
    db.run_as_superuser(&format!("GRANT CREATE ON SCHEMA public TO {}", OWNER.0))
        .await;
    let (ok, stdout, stderr) = toolward(
        &db.config(OLD_GATEWAY),
        &["call", "s__echo", "--args", r#"{"before": "upgrade"}"#],
    );
    assert!(ok, "a call before the upgrade failed: {stdout}{stderr}");
    let old = db.connect(OLD_GATEWAY).await;
    old.batch_execute("UPDATE toolward_audit SET line = line")
        .await
        .expect("before the upgrade the old role owns the records");
    // What a compromised owner plants before it is upgraded: rights for everyone, and a
    // function of its own behind a trigger on the records.
    old.batch_execute(
        "GRANT ALL ON toolward_audit, toolward_keys TO PUBLIC; \
         CREATE FUNCTION toolward_planted() RETURNS trigger LANGUAGE plpgsql AS \
         'BEGIN RETURN NEW; END'; \
         CREATE TRIGGER toolward_planted BEFORE INSERT ON toolward_audit \
         FOR EACH ROW EXECUTE FUNCTION toolward_planted()",
    )
    .await
    .unwrap();
    drop(old);

    db.run_as_superuser(&docs_block(UPGRADE_BLOCK).replace("toolward_gw_old", OLD_GATEWAY.0))
        .await;
    let migrated = db.migrate();
    assert!(
        migrated.contains("granted the rights of docs/fleet.md"),
        "{migrated}"
    );

    let (ok, stdout, stderr) = toolward(
        &db.config(OLD_GATEWAY),
        &["call", "s__echo", "--args", r#"{"after": "upgrade"}"#],
    );
    assert!(ok, "a call after the upgrade failed: {stdout}{stderr}");
    let calls = exported(&db)
        .iter()
        .filter(|r| r["tool"] == "s__echo" && r["kind"] == "result")
        .count();
    assert_eq!(calls, 2, "both calls audited in one chain");
    let old = db.connect(OLD_GATEWAY).await;
    for statement in [
        "DELETE FROM toolward_audit",
        "UPDATE toolward_audit SET line = line",
        "TRUNCATE toolward_audit",
        "DROP TABLE toolward_audit",
        "ALTER TABLE toolward_audit OWNER TO toolward_gw_before_roles",
        "CREATE TABLE toolward_more (x int)",
    ] {
        assert_denied(&old, OLD_GATEWAY.0, statement).await;
    }
    // The planted rights and trigger are gone: the auditor may not read the key.
    let auditor = db.connect(AUDITOR).await;
    assert_denied(&auditor, AUDITOR.0, "SELECT * FROM toolward_keys").await;
    let admin = connect(&db.admin_url).await;
    let triggers = admin
        .query_one(
            "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal AND tgname = 'toolward_planted'",
            &[],
        )
        .await
        .unwrap()
        .get::<_, i64>(0);
    assert_eq!(triggers, 0);
    drop((auditor, admin));
    let (ok, stdout, stderr) = toolward(&db.config(AUDITOR), &["audit", "verify"]);
    assert!(ok && stdout.contains("chain intact"), "{stdout}{stderr}");
    drop(old);
    db.drop_database().await;
}

/// Holds a call as the gateway holds one (its `INSERT`), waiting until far in the future.
async fn hold(gateway: &deadpool_postgres::Object, call_id: &str) {
    gateway
        .execute(
            "INSERT INTO toolward_approvals (call_id, request, held_by, held_at_ms, expires_at_ms) \
             VALUES ($1, '{}', 'gw1:1', 0, 9223372036854775807)",
            &[&call_id],
        )
        .await
        .unwrap();
}

/// The state and answerer of the held call `call_id`.
async fn answer_of(client: &deadpool_postgres::Object, call_id: &str) -> (String, Option<String>) {
    let row = client
        .query_one(
            "SELECT state, answerer FROM toolward_approvals WHERE call_id = $1",
            &[&call_id],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_or_abandoned_approval_cannot_be_rewritten_by_the_approver_or_the_gateway() {
    let Some(db) = RoleDatabase::new("answered approvals stay").await else {
        return;
    };
    db.migrate();
    let gateway = db.connect(GATEWAY).await;
    let approver = db.connect(APPROVER).await;
    for call_id in ["answered", "abandoned", "pending"] {
        hold(&gateway, call_id).await;
    }
    // What toolward does: an answer (`approvals approve`) and an abandonment (a gateway whose
    // wait ended), each of a pending row.
    approver
        .batch_execute(
            "UPDATE toolward_approvals SET state = 'approved', reason = NULL, answerer = 'alice', \
             answerer_uid = 1000, answered_from = 'laptop:7', answered_at_ms = 1 \
             WHERE call_id = 'answered' AND state = 'pending'",
        )
        .await
        .unwrap();
    gateway
        .batch_execute(
            "UPDATE toolward_approvals SET state = 'abandoned' \
             WHERE call_id = 'abandoned' AND state = 'pending'",
        )
        .await
        .unwrap();

    for (client, role, statement) in [
        (
            &approver,
            APPROVER.0,
            "UPDATE toolward_approvals SET answerer = 'mallory', answerer_uid = 0 WHERE call_id = 'answered'",
        ),
        (
            &approver,
            APPROVER.0,
            "UPDATE toolward_approvals SET state = 'denied', reason = 'never approved' WHERE call_id = 'answered'",
        ),
        (
            &approver,
            APPROVER.0,
            "UPDATE toolward_approvals SET state = 'approved' WHERE call_id = 'abandoned'",
        ),
        (
            &gateway,
            GATEWAY.0,
            "UPDATE toolward_approvals SET state = 'abandoned' WHERE call_id = 'answered'",
        ),
        (
            &gateway,
            GATEWAY.0,
            "UPDATE toolward_approvals SET state = 'pending' WHERE call_id = 'abandoned'",
        ),
    ] {
        assert_denied(client, role, statement).await;
    }
    assert_eq!(
        answer_of(&approver, "answered").await,
        ("approved".to_owned(), Some("alice".to_owned()))
    );
    assert_eq!(
        answer_of(&approver, "abandoned").await,
        ("abandoned".to_owned(), None)
    );

    // The held call itself never changes, not even by the owner (the one role with the
    // column rights to try).
    let owner = db.connect(OWNER).await;
    for statement in [
        "UPDATE toolward_approvals SET request = '{\"tool\": \"other\"}' WHERE call_id = 'pending'",
        "UPDATE toolward_approvals SET call_id = 'renamed' WHERE call_id = 'pending'",
        "UPDATE toolward_approvals SET held_by = 'elsewhere:1' WHERE call_id = 'pending'",
        "UPDATE toolward_approvals SET held_at_ms = 1 WHERE call_id = 'pending'",
        "UPDATE toolward_approvals SET expires_at_ms = 1 WHERE call_id = 'pending'",
    ] {
        assert_denied(&owner, OWNER.0, statement).await;
    }
    // And a pending call is still answered as toolward answers it.
    let answered = approver
        .execute(
            "UPDATE toolward_approvals SET state = 'denied', reason = 'no', answerer = 'alice' \
             WHERE call_id = 'pending' AND state = 'pending'",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(answered, 1);
    drop((gateway, approver, owner));
    db.drop_database().await;
}

/// The head row's `next_seq`.
async fn next_seq(client: &deadpool_postgres::Object) -> i64 {
    client
        .query_one("SELECT next_seq FROM toolward_audit_head WHERE id = 1", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_role_cannot_insert_an_audit_row_away_from_the_head_and_the_fleet_keeps_calling()
{
    let Some(db) = RoleDatabase::new("audit rows at the head").await else {
        return;
    };
    db.migrate();
    let (ok, stdout, stderr) = toolward(
        &db.config(GATEWAY),
        &["call", "s__echo", "--args", r#"{"n": 1}"#],
    );
    assert!(ok, "a call as the gateway failed: {stdout}{stderr}");
    let gateway = db.connect(GATEWAY).await;
    let next = next_seq(&gateway).await;
    assert!(next > 0);
    for statement in [
        // Far past the head: it would take the seq of a record the chain writes later, and
        // that record's primary key conflict would refuse every call of the fleet.
        format!(
            "INSERT INTO toolward_audit (seq, line) VALUES ({}, '\\x7b7d')",
            next + 1_000_000
        ),
        // At the head, without moving it.
        format!("INSERT INTO toolward_audit (seq, line) VALUES ({next}, '\\x7b7d')"),
        // Past the head, moving the head but not past the record.
        format!(
            "BEGIN; \
             INSERT INTO toolward_audit (seq, line) VALUES ({}, '\\x7b7d'); \
             UPDATE toolward_audit_head SET next_seq = {} WHERE id = 1; \
             COMMIT",
            next + 5,
            next + 1
        ),
    ] {
        assert_denied(&gateway, GATEWAY.0, &statement).await;
        let _ = gateway.batch_execute("ROLLBACK").await;
    }
    assert_eq!(
        next_seq(&gateway).await,
        next,
        "a refused insert moved the head"
    );
    let (ok, stdout, stderr) = toolward(
        &db.config(GATEWAY),
        &["call", "s__echo", "--args", r#"{"n": 2}"#],
    );
    assert!(
        ok,
        "a call after the refused inserts failed: {stdout}{stderr}"
    );
    let (ok, stdout, stderr) = toolward(&db.config(AUDITOR), &["audit", "verify"]);
    assert!(ok && stdout.contains("chain intact"), "{stdout}{stderr}");

    // What the rule leaves (docs/fleet.md): a gateway that moves the head past its record
    // leaves a gap, which `audit verify` reports; the gap cannot be filled afterwards.
    let next = next_seq(&gateway).await;
    gateway
        .batch_execute(&format!(
            "BEGIN; \
             INSERT INTO toolward_audit (seq, line) VALUES ({}, '\\x7b7d'); \
             UPDATE toolward_audit_head SET next_seq = {} WHERE id = 1; \
             COMMIT",
            next + 5,
            next + 6
        ))
        .await
        .unwrap();
    assert_denied(
        &gateway,
        GATEWAY.0,
        &format!("INSERT INTO toolward_audit (seq, line) VALUES ({next}, '\\x7b7d')"),
    )
    .await;
    let (ok, stdout, stderr) = toolward(&db.config(AUDITOR), &["audit", "verify"]);
    assert!(!ok, "a chain with a gap verified: {stdout}{stderr}");
    drop(gateway);
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_2_database_is_refused_until_migrate_adds_the_triggers() {
    let Some(db) = RoleDatabase::new("version 2 to 3").await else {
        return;
    };
    db.migrate();
    // A version 2 database: the same tables, without the triggers.
    let admin = connect(&db.admin_url).await;
    admin
        .batch_execute(
            "DROP FUNCTION toolward_approvals_answered_once, toolward_audit_at_head, \
             toolward_audit_below_head CASCADE; \
             UPDATE toolward_schema SET version = 2",
        )
        .await
        .unwrap();
    let (ok, stdout, stderr) = toolward(&db.config(GATEWAY), &["call", "s__echo"]);
    assert!(
        !ok && stderr.contains("holds schema version 2, and this toolward needs version 7: run `toolward store migrate --config"),
        "{stdout}{stderr}"
    );
    let migrated = db.migrate();
    assert!(
        migrated.contains("migrated the schema from version 2 to 7"),
        "{migrated}"
    );
    let gateway = db.connect(GATEWAY).await;
    hold(&gateway, "held").await;
    gateway
        .batch_execute("UPDATE toolward_approvals SET state = 'abandoned' WHERE call_id = 'held'")
        .await
        .unwrap();
    assert_denied(
        &gateway,
        GATEWAY.0,
        "UPDATE toolward_approvals SET state = 'approved' WHERE call_id = 'held'",
    )
    .await;
    drop((gateway, admin));
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_database_is_refused_until_migrate_adds_the_labels_table_which_a_gateway_role_keeps()
 {
    let Some(db) = RoleDatabase::new("version 3 to 6").await else {
        return;
    };
    db.migrate();
    // A version 3 database: the same tables but the labels'.
    let admin = connect(&db.admin_url).await;
    admin
        .batch_execute("DROP TABLE toolward_labels; UPDATE toolward_schema SET version = 3")
        .await
        .unwrap();
    let (ok, stdout, stderr) = toolward(&db.config(GATEWAY), &["call", "s__echo"]);
    assert!(
        !ok && stderr.contains("holds schema version 3, and this toolward needs version 7: run `toolward store migrate --config"),
        "{stdout}{stderr}"
    );
    let migrated = db.migrate();
    assert!(
        migrated.contains("migrated the schema from version 3 to 7")
            && migrated.contains("granted the rights of docs/fleet.md")
            && !migrated.contains("drift:"),
        "{migrated}"
    );
    // A call whose result labels its session, as the gateway role: the join (and the
    // prune of lapsed rows after a store's first join) runs with the role's rights.
    crate::fleet::label_rules(&db.fleet, "s");
    let (ok, stdout, stderr) = toolward(
        &db.config(GATEWAY),
        &["call", "s__echo", "--args", r#"{"labels": true}"#],
    );
    assert!(
        ok,
        "a labelled call as the gateway failed: {stdout}{stderr}"
    );
    assert!(
        !stderr.contains("cannot delete lapsed labels"),
        "the gateway could not prune labels: {stderr}"
    );
    let owner = db.connect(OWNER).await;
    let rows = owner
        .query(
            "SELECT kind, untrusted, confidentiality, rank FROM toolward_labels",
            &[],
        )
        .await
        .unwrap();
    let rows: Vec<(String, bool, String, i64)> = rows
        .iter()
        .map(|row| (row.get(0), row.get(1), row.get(2), row.get(3)))
        .collect();
    assert_eq!(
        rows,
        [(String::from("session"), true, String::from("public"), 1)]
    );
    let gateway = db.connect(GATEWAY).await;
    gateway
        .batch_execute("DELETE FROM toolward_labels WHERE at_ms < 0")
        .await
        .unwrap();
    // The grants table of version 5 came with the same `migrate`, readable by the gateway
    // role that `auth status` runs as.
    let (ok, stdout, stderr) = toolward(&db.config(GATEWAY), &["auth", "status"]);
    assert!(ok && stdout.contains("no grants"), "{stdout}{stderr}");
    drop((gateway, owner, admin));
    db.drop_database().await;
}

/// What a role with too much reach leaves on the tables, for `migrate` to find: rights for
/// everyone and for a login role, a column and a grant option beyond a group's, row-level
/// security with a policy whose name holds an escape character, a rule and a trigger.
const PLANTED: &str = r#"
GRANT SELECT ON toolward_keys TO PUBLIC;
GRANT INSERT, DELETE ON toolward_audit TO toolward_gw1;
GRANT UPDATE (answerer) ON toolward_approvals TO toolward_gateway;
GRANT SELECT ON toolward_audit TO toolward_auditor WITH GRANT OPTION;
ALTER TABLE toolward_approvals ENABLE ROW LEVEL SECURITY;
CREATE POLICY U&"look\001B[2Khere" ON toolward_approvals USING (true);
CREATE RULE toolward_copy AS ON INSERT TO toolward_audit DO ALSO NOTIFY toolward_copy;
CREATE FUNCTION toolward_planted() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END';
CREATE TRIGGER toolward_planted BEFORE INSERT ON toolward_audit
    FOR EACH ROW EXECUTE FUNCTION toolward_planted();
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_names_each_grant_policy_rule_and_trigger_beyond_the_roles_and_fails_unless_accepted()
 {
    let Some(db) = RoleDatabase::new("migrate reports drift").await else {
        return;
    };
    db.migrate();
    let admin = connect(&db.admin_url).await;
    admin.batch_execute(PLANTED).await.unwrap();

    let owner = db.config(OWNER);
    let (ok, stdout, stderr) = toolward(&owner, &["store", "migrate"]);
    assert!(
        !ok,
        "migrate passed a database with drift: {stdout}{stderr}"
    );
    let drift: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("drift: "))
        .collect();
    assert_eq!(
        drift,
        [
            "toolward_approvals: `UPDATE` of `answerer` granted to `toolward_gateway`: REVOKE UPDATE (answerer) ON toolward_approvals FROM toolward_gateway;",
            "toolward_audit: `SELECT` grantable by `toolward_auditor`: REVOKE GRANT OPTION FOR SELECT ON toolward_audit FROM toolward_auditor;",
            "toolward_audit: `DELETE` granted to `toolward_gw1`: REVOKE DELETE ON toolward_audit FROM toolward_gw1;",
            "toolward_audit: `INSERT` granted to `toolward_gw1`: REVOKE INSERT ON toolward_audit FROM toolward_gw1;",
            "toolward_keys: `SELECT` granted to `PUBLIC`: REVOKE SELECT ON toolward_keys FROM PUBLIC;",
            "toolward_approvals: row-level security enabled: ALTER TABLE toolward_approvals DISABLE ROW LEVEL SECURITY;",
            "toolward_approvals: row-level security policy `look\\u{001B}[2Khere` not made by `migrate`: DROP POLICY U&\"look\\001B[2Khere\" ON toolward_approvals;",
            "toolward_audit: rule `toolward_copy` not made by `migrate`: DROP RULE toolward_copy ON toolward_audit;",
            "toolward_audit: trigger `toolward_planted` not made by `migrate`: DROP TRIGGER toolward_planted ON toolward_audit;",
        ],
        "{stdout}"
    );
    assert!(!stdout.contains('\u{1b}'), "a raw escape was printed");
    assert!(
        stderr.contains("9 things beyond docs/fleet.md's roles")
            && stderr.contains("--accept-drift"),
        "{stderr}"
    );
    let (ok, accepted, stderr) = toolward(&owner, &["store", "migrate", "--accept-drift"]);
    assert!(
        ok && accepted.contains("accepted 9 findings"),
        "{accepted}{stderr}"
    );

    // Each line's SQL, run as the owner, removes what it names.
    let as_owner = db.connect(OWNER).await;
    for line in &drift {
        let (_, sql) = line.split_once(": ").unwrap().1.rsplit_once(": ").unwrap();
        as_owner
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("`{sql}`: {e}"));
    }
    let clean = db.migrate();
    assert!(!clean.contains("drift:"), "{clean}");
    drop((admin, as_owner));
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_refuses_a_schema_others_can_create_in_and_runs_nothing_of_theirs() {
    let Some(db) = RoleDatabase::new("migrate and an open schema").await else {
        return;
    };
    db.migrate();
    // Another role of the database may create in the schema, and plants a `format` whose
    // exact types beat `pg_catalog.format` (the attack: it ran as the owner during migrate).
    db.run_as_superuser(
        "CREATE ROLE toolward_mallory LOGIN PASSWORD 'mallory';
         GRANT CONNECT ON DATABASE toolward TO toolward_mallory;
         GRANT USAGE, CREATE ON SCHEMA public TO toolward_mallory",
    )
    .await;
    let mallory = db.connect(("toolward_mallory", "mallory")).await;
    mallory
        .batch_execute(
            "CREATE TABLE public.mallory_marks (who text);
             GRANT INSERT ON public.mallory_marks TO PUBLIC;
             CREATE FUNCTION public.format(text, name) RETURNS text LANGUAGE sql AS $$
                 INSERT INTO public.mallory_marks VALUES (current_user::text);
                 SELECT 'SELECT 1'::text
             $$;
             GRANT EXECUTE ON FUNCTION public.format(text, name) TO PUBLIC",
        )
        .await
        .unwrap();

    let owner = db.config(OWNER);
    let (ok, stdout, stderr) = toolward(&owner, &["store", "migrate"]);
    assert!(
        !ok,
        "migrate ran in a schema another role can create in: {stdout}{stderr}"
    );
    assert!(
        stderr.contains("`toolward_mallory` can create objects in schema `public`")
            && stderr.contains("REVOKE CREATE ON SCHEMA public FROM toolward_mallory;"),
        "{stderr}"
    );
    let marks = mallory
        .query("SELECT who FROM public.mallory_marks", &[])
        .await
        .unwrap();
    assert!(marks.is_empty(), "the planted function ran during migrate");

    // The schema's owner takes the right back: migrate runs, and still calls nothing of
    // the planted function's.
    db.run_as_superuser("REVOKE CREATE ON SCHEMA public FROM toolward_mallory")
        .await;
    db.migrate();
    let marks = mallory
        .query("SELECT who FROM public.mallory_marks", &[])
        .await
        .unwrap();
    assert!(marks.is_empty(), "the planted function ran during migrate");
    drop(mallory);
    db.run_as_superuser("REVOKE CONNECT ON DATABASE toolward FROM toolward_mallory")
        .await;
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_refuses_a_schema_first_on_the_owners_path_that_another_role_owns() {
    let Some(db) = RoleDatabase::new("migrate and a schema of another's").await else {
        return;
    };
    // A role that may create schemas makes one named after the owner role: `"$user"` puts
    // it first on the owner's `search_path`, and it owns what is in it.
    db.run_as_superuser(
        "CREATE ROLE toolward_mallory LOGIN PASSWORD 'mallory';
         GRANT CONNECT, CREATE ON DATABASE toolward TO toolward_mallory",
    )
    .await;
    let mallory = db.connect(("toolward_mallory", "mallory")).await;
    mallory
        .batch_execute(
            "CREATE SCHEMA toolward_owner;
             GRANT USAGE, CREATE ON SCHEMA toolward_owner TO toolward_owner",
        )
        .await
        .unwrap();
    let (ok, stdout, stderr) = toolward(&db.config(OWNER), &["store", "migrate"]);
    assert!(
        !ok,
        "migrate ran in another role's schema: {stdout}{stderr}"
    );
    assert!(
        stderr.contains("schema `toolward_owner`")
            && stderr.contains("owned by `toolward_mallory`"),
        "{stderr}"
    );
    let made = mallory
        .query(
            "SELECT 1 FROM pg_catalog.pg_class WHERE relname = 'toolward_keys'",
            &[],
        )
        .await
        .unwrap();
    assert!(
        made.is_empty(),
        "migrate made tables in another role's schema"
    );
    drop(mallory);
    db.run_as_superuser("REVOKE CONNECT, CREATE ON DATABASE toolward FROM toolward_mallory")
        .await;
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_refuses_toolward_tables_another_role_made_before_it() {
    let Some(db) = RoleDatabase::new("migrate and tables made before").await else {
        return;
    };
    // Before the first migrate, a role that could then create in the schema makes the key
    // table with a key of its own; the right is taken back, as docs/fleet.md's block does.
    db.run_as_superuser(
        "CREATE ROLE toolward_mallory LOGIN PASSWORD 'mallory';
         GRANT CONNECT ON DATABASE toolward TO toolward_mallory;
         GRANT USAGE, CREATE ON SCHEMA public TO toolward_mallory",
    )
    .await;
    let mallory = db.connect(("toolward_mallory", "mallory")).await;
    mallory
        .batch_execute(
            "CREATE TABLE public.toolward_keys (name text PRIMARY KEY, key bytea NOT NULL);
             INSERT INTO public.toolward_keys VALUES ('request-state', '\\x41414141');
             GRANT ALL ON public.toolward_keys TO toolward_owner WITH GRANT OPTION",
        )
        .await
        .unwrap();
    db.run_as_superuser("REVOKE CREATE ON SCHEMA public FROM toolward_mallory")
        .await;
    let (ok, stdout, stderr) = toolward(&db.config(OWNER), &["store", "migrate"]);
    assert!(!ok, "migrate kept another role's tables: {stdout}{stderr}");
    assert!(
        stderr.contains("`toolward_keys` (owned by `toolward_mallory`)"),
        "{stderr}"
    );
    drop(mallory);
    db.run_as_superuser("REVOKE CONNECT ON DATABASE toolward FROM toolward_mallory")
        .await;
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_role_keeps_its_own_checkpoint_rows_which_auditors_and_the_console_read_but_no_other_login_writes()
 {
    let Some(db) = RoleDatabase::new("checkpoint rows").await else {
        return;
    };
    db.migrate();
    let gateway = db.config(GATEWAY);
    let vkey =
        crate::checkpoint_fleet::add_checkpoint_key(&gateway, "toolward.test/roles/gw1", 600_000);
    let (ok, stdout, stderr) = toolward(&gateway, &["call", "s__echo"]);
    assert!(ok, "a call as the gateway failed: {stdout}{stderr}");
    let (ok, note, stderr) = toolward(&gateway, &["audit", "checkpoint"]);
    assert!(
        ok,
        "`audit checkpoint` as the gateway failed: {note}{stderr}"
    );
    let (ok, proved, stderr) = toolward(&gateway, &["audit", "prove", "0"]);
    assert!(ok, "`audit prove` as the gateway failed: {proved}{stderr}");

    // The auditors and the console read the row, written by the gateway's login.
    for role in [AUDITOR, CONSOLE] {
        let client = db.connect(role).await;
        let row = client
            .query_one("SELECT signer, writer, note FROM toolward_checkpoints", &[])
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), vkey);
        assert_eq!(row.get::<_, String>(1), GATEWAY.0);
        assert_eq!(row.get::<_, String>(2), note);
        for statement in [
            "INSERT INTO toolward_checkpoints (signer, origin, size, note) VALUES ('x', 'y', 0, '')",
            "UPDATE toolward_checkpoints SET size = 0",
            "DELETE FROM toolward_checkpoints",
        ] {
            assert_denied(&client, role.0, statement).await;
        }
    }
    let approver = db.connect(APPROVER).await;
    assert_denied(&approver, APPROVER.0, "SELECT * FROM toolward_checkpoints").await;
    // Copied away, the auditor checks the chain against it.
    let away = db.fleet.dir.path().join("gw1.checkpoint");
    std::fs::write(&away, &note).unwrap();
    let (ok, stdout, stderr) = toolward(
        &db.config(AUDITOR),
        &[
            "audit",
            "verify",
            "--checkpoint",
            away.to_str().unwrap(),
            "--public-key",
            &vkey,
        ],
    );
    assert!(
        ok && stdout.contains("the log holds them unchanged"),
        "{stdout}{stderr}"
    );

    // The gateway neither deletes its row nor moves it to another key; another gateway's
    // login neither rewrites nor deletes it, as itself or as the group role.
    let own = db.connect(GATEWAY).await;
    for statement in [
        "DELETE FROM toolward_checkpoints",
        "UPDATE toolward_checkpoints SET signer = 'x'",
        "UPDATE toolward_checkpoints SET writer = 'x'",
    ] {
        assert_denied(&own, GATEWAY.0, statement).await;
    }
    let admin = connect(&db.admin_url).await;
    admin
        .batch_execute(
            "CREATE ROLE toolward_gw2 LOGIN PASSWORD 'GW2-PASSWORD' IN ROLE toolward_gateway",
        )
        .await
        .or_else(|e| {
            (e.code().map(|c| c.code()) == Some(DUPLICATE_OBJECT))
                .then_some(())
                .ok_or(e)
        })
        .unwrap();
    let second = db.connect(("toolward_gw2", "GW2-PASSWORD")).await;
    for statement in [
        "UPDATE toolward_checkpoints SET note = 'forged', size = 0",
        "DELETE FROM toolward_checkpoints",
        "SET ROLE toolward_gateway; UPDATE toolward_checkpoints SET note = 'forged'",
    ] {
        assert_denied(&second, "toolward_gw2", statement).await;
    }
    second.batch_execute("RESET ROLE").await.unwrap();
    // A row of its own for the same key (it cannot sign with it) leaves the gateway's row be.
    second
        .batch_execute(&format!(
            "INSERT INTO toolward_checkpoints (signer, origin, size, note) VALUES ('{vkey}', 'toolward.test/roles/gw1', 0, 'planted')"
        ))
        .await
        .unwrap();
    let (ok, again, stderr) = toolward(&gateway, &["audit", "checkpoint"]);
    assert!(
        ok,
        "a planted row stopped the gateway's checkpoint: {again}{stderr}"
    );
    let (ok, latest, stderr) = toolward(&gateway, &["audit", "checkpoint", "--latest"]);
    assert!(ok && latest == again, "{latest}{stderr}");
    drop((own, second, admin, approver));
    db.drop_database().await;
}
