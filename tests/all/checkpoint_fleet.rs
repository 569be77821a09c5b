//! Checkpoints of a fleet's chain (issue 33.3, "in a fleet, the database's chain is the tree
//! and each gateway signs with its own key"), against the real PostgreSQL
//! (`TOOLWARD_TEST_DATABASE_URL`, a superuser's URL; see `store_contract` for when these fail
//! or skip without it). Each test makes a database of its own, so its chain is its alone.
//! Notes are opened and proofs checked by the independent readers of `checkpoint`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolward::config::Config;
use toolward::store::postgres::PgStore;

use crate::checkpoint::{hexes, mth, open_checkpoint, rfc_path, rfc_proof, sha256, text};
use crate::fleet::Fleet;
use crate::store_contract::test_database_url;
use crate::support::toolward_binary;

/// Makes a checkpoint key named `name` next to `config` with `toolward audit keygen`, names it
/// in the config's `audit.checkpoint` (every `interval_ms`), and returns its verifier key.
pub(crate) fn add_checkpoint_key(config: &Path, name: &str, interval_ms: u64) -> String {
    let dir = config.parent().unwrap();
    let file = format!("{}.key", name.replace('/', "-"));
    let made = Command::new(toolward_binary().unwrap())
        .args(["audit", "keygen", "--name", name, "--out"])
        .arg(dir.join(&file))
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", text(&made));
    let mut document: Value =
        serde_json::from_str(&std::fs::read_to_string(config).unwrap()).unwrap();
    document["audit"]["checkpoint"] = json!({"key": file, "interval_ms": interval_ms});
    std::fs::write(config, document.to_string()).unwrap();
    String::from_utf8(made.stdout).unwrap().trim().to_owned()
}

/// A database of its own, migrated, with the fleet's two gateway configs, each with its own
/// checkpoint key.
struct FleetDb {
    admin_url: String,
    name: String,
    url: String,
    fleet: Fleet,
    /// The verifier keys of `gw1.json` and `gw2.json`.
    vkeys: [String; 2],
}

impl FleetDb {
    async fn new(test: &str, interval_ms: u64) -> Option<FleetDb> {
        toolward_binary()?;
        let admin_url = test_database_url(test)?;
        let admin = PgStore::new(&admin_url).unwrap().pool().unwrap();
        let name = format!("toolward_ckpt_{}", toolward::ids::new_ulid().to_lowercase());
        admin
            .get()
            .await
            .unwrap()
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap();
        let (base, _) = admin_url.rsplit_once('/').unwrap();
        let url = format!("{base}/{name}");
        crate::store_contract::migrate(&url).await;
        let fleet = Fleet::unmigrated(&url, "s").await;
        let vkeys = [1, 2].map(|n| {
            add_checkpoint_key(
                &fleet.config(n),
                &format!("toolward.test/fleet/gw{n}"),
                interval_ms,
            )
        });
        Some(FleetDb {
            admin_url,
            name,
            url,
            fleet,
            vkeys,
        })
    }

    /// `toolward ARGS --config gwN.json`.
    fn run(&self, n: usize, args: &[&str]) -> Output {
        Command::new(toolward_binary().unwrap())
            .args(args)
            .arg("--config")
            .arg(self.fleet.config(n))
            .output()
            .unwrap()
    }

    /// The chain's records, each line as hashed: the leaves.
    fn leaves(&self) -> Vec<Vec<u8>> {
        let exported = self.run(1, &["audit", "export"]);
        assert!(exported.status.success(), "{}", text(&exported));
        exported
            .stdout
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .map(<[u8]>::to_vec)
            .collect()
    }

    /// The latest checkpoint gateway `n` keeps in its state folder.
    fn kept(&self, n: usize) -> Option<String> {
        let dir = self
            .fleet
            .dir
            .path()
            .join(format!("state{n}/audit-checkpoints"));
        let file = std::fs::read_dir(dir).ok()?.next()?.ok()?.path();
        assert!(
            file.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("postgres-"),
            "{}",
            file.display()
        );
        std::fs::read_to_string(file).ok()
    }

    /// `audit verify --config gwN.json --json --checkpoint FILE --public-key VKEY`.
    fn verify_against(&self, n: usize, checkpoint: &Path, vkey: &str) -> Output {
        self.run(
            n,
            &[
                "audit",
                "verify",
                "--json",
                "--checkpoint",
                checkpoint.to_str().unwrap(),
                "--public-key",
                vkey,
            ],
        )
    }

    /// A connection as the superuser that made the database: its owner's powers.
    async fn owner(&self) -> deadpool_postgres::Object {
        PgStore::new(&self.url)
            .unwrap()
            .pool()
            .unwrap()
            .get()
            .await
            .unwrap()
    }

    fn away(&self, name: &str, note: &str) -> PathBuf {
        let path = self.fleet.dir.path().join(name);
        std::fs::write(&path, note).unwrap();
        path
    }

    async fn drop_database(self) {
        let admin = PgStore::new(&self.admin_url).unwrap().pool().unwrap();
        let _ = admin
            .get()
            .await
            .unwrap()
            .batch_execute(&format!("DROP DATABASE {} WITH (FORCE)", self.name))
            .await;
    }
}

/// Every record from `from` on rewritten by the database's owner so the chain and the head
/// row agree again: record `from` changed, each later `prev` made to chain.
async fn rewrite_chain_as_owner(db: &FleetDb, from: usize) {
    let owner = db.owner().await;
    let mut lines = db.leaves();
    let mut prev = if from == 0 {
        "0".repeat(64)
    } else {
        hex::encode(sha256(&[&lines[from - 1]]))
    };
    for (seq, line) in lines.iter_mut().enumerate().skip(from) {
        let mut record = String::from_utf8(line.clone()).unwrap();
        if seq == from {
            record = record.replacen("\"time\":", "\"time\":1", 1);
        }
        let old_prev = serde_json::from_str::<Value>(&record).unwrap()["prev"]
            .as_str()
            .unwrap()
            .to_owned();
        record = record.replacen(&old_prev, &prev, 1);
        prev = hex::encode(sha256(&[record.as_bytes()]));
        *line = record.into_bytes();
        owner
            .execute(
                "UPDATE toolward_audit SET line = $2 WHERE seq = $1",
                &[&i64::try_from(seq).unwrap(), &line.as_slice()],
            )
            .await
            .unwrap();
    }
    owner
        .execute(
            "UPDATE toolward_audit_head SET last_hash = $1 WHERE id = 1",
            &[&prev],
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_gateways_on_one_database_each_sign_its_chain_with_their_own_key_at_their_interval_and_at_shutdown()
 {
    let Some(db) = FleetDb::new("two gateways sign the fleet's chain", 1000).await else {
        return;
    };
    let one = toolward::Toolward::start(Config::from_path(&db.fleet.config(1)).unwrap())
        .await
        .unwrap();
    let two = toolward::Toolward::start(Config::from_path(&db.fleet.config(2)).unwrap())
        .await
        .unwrap();
    crate::support::call(&one, "s__echo").await;
    crate::support::call(&two, "s__echo").await;
    let records = db.leaves().len() as u64;
    // Each signs at its interval, covering the records so far.
    let deadline = Instant::now() + Duration::from_secs(30);
    for n in 1..=2 {
        while db
            .kept(n)
            .and_then(|note| open_checkpoint(&note, &db.vkeys[n - 1]))
            .is_none_or(|(_, size, _)| size < records)
        {
            assert!(
                Instant::now() < deadline,
                "gateway {n} signed no checkpoint covering the {records} records"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    crate::support::call(&one, "s__echo").await;
    one.shutdown().await;
    crate::support::call(&two, "s__echo").await;
    two.shutdown().await;
    let leaves = db.leaves();

    let owner = db.owner().await;
    let rows = owner
        .query(
            "SELECT signer, origin, size, note FROM toolward_checkpoints ORDER BY origin",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "one row per gateway's key");
    for n in 1..=2 {
        let (vkey, other) = (&db.vkeys[n - 1], &db.vkeys[2 - n]);
        let note = db.kept(n).unwrap();
        let (origin, size, root) =
            open_checkpoint(&note, vkey).expect("the gateway's note verifies with its key");
        assert_eq!(origin, format!("toolward.test/fleet/gw{n}"));
        assert!(size as usize <= leaves.len());
        assert_eq!(root, mth(&leaves[..size as usize]), "gateway {n}");
        assert!(
            open_checkpoint(&note, other).is_none(),
            "gateway {n}'s note verifies with the other gateway's key"
        );
        // The table holds the same note, under the gateway's verifier key.
        let row = &rows[n - 1];
        assert_eq!(row.get::<_, String>(0), *vkey);
        assert_eq!(row.get::<_, String>(1), origin);
        assert_eq!(row.get::<_, i64>(2), size as i64);
        assert_eq!(row.get::<_, String>(3), note);

        // Copied away, it verifies against the database with its own key, not the other's.
        let away = db.away(&format!("gw{n}.checkpoint"), &note);
        let verified = db.verify_against(n, &away, vkey);
        assert!(verified.status.success(), "{}", text(&verified));
        let report: Value = serde_json::from_slice(&verified.stdout).unwrap();
        assert_eq!(report["checkpoint"]["consistent"], true, "{report}");
        assert_eq!(
            report["checkpoint"]["consistency_proof"],
            json!(hexes(&rfc_proof(size as usize, &leaves)))
        );
        let refused = db.verify_against(n, &away, other);
        assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
        assert!(
            text(&refused).contains("carries no signature by that name and id"),
            "{}",
            text(&refused)
        );
    }
    // The gateway that shut down last covers every record of the chain.
    let (_, size, _) = open_checkpoint(&db.kept(2).unwrap(), &db.vkeys[1]).unwrap();
    assert_eq!(
        size as usize,
        leaves.len(),
        "the shutdown checkpoint covers the chain"
    );
    drop(owner);
    db.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_rewritten_by_its_owner_after_a_gateways_checkpoint_was_copied_away_is_caught_and_its_proofs_match_rfc_6962()
 {
    let Some(db) = FleetDb::new("a fleet's chain rewritten by its owner", 600_000).await else {
        return;
    };
    let one = toolward::Toolward::start(Config::from_path(&db.fleet.config(1)).unwrap())
        .await
        .unwrap();
    crate::support::call(&one, "s__echo").await;
    crate::support::call(&one, "s__echo").await;
    one.shutdown().await;
    drop(one);

    let signed = db.run(1, &["audit", "checkpoint"]);
    assert!(signed.status.success(), "{}", text(&signed));
    let note = String::from_utf8(signed.stdout).unwrap();
    let away = db.away("anchored.checkpoint", &note);
    let first = db.leaves();
    let (_, size, root) = open_checkpoint(&note, &db.vkeys[0]).expect("the note verifies");
    assert_eq!((size as usize, root), (first.len(), mth(&first)));

    // A running signer of the chain (the gateway's, through the library), with the leaves read.
    let state = db.fleet.dir.path().join("state-library");
    let key = toolward::checkpoint::NoteSigner::read(
        &db.fleet.dir.path().join("toolward.test-fleet-gw1.key"),
    )
    .unwrap();
    let store = PgStore::new(&db.url).unwrap();
    let mut chain = toolward::store::postgres::checkpoints::ChainSigner::new(
        &store,
        Arc::new(toolward::store::StateDir::open(&state).unwrap()),
        key,
        "toolward.test/fleet/library".to_owned(),
    )
    .unwrap();
    assert!(chain.sign(false).await.unwrap().is_some());

    // More records, from the other gateway.
    let two = toolward::Toolward::start(Config::from_path(&db.fleet.config(2)).unwrap())
        .await
        .unwrap();
    crate::support::call(&two, "s__echo").await;
    two.shutdown().await;
    drop(two);
    let leaves = db.leaves();
    assert!(leaves.len() > first.len());

    // Every record's inclusion proof, in the whole chain and in the checkpoint's tree.
    for seq in 0..leaves.len() {
        for tree in [leaves.len(), first.len()] {
            if seq >= tree {
                continue;
            }
            let proved = db.run(
                1,
                &[
                    "audit",
                    "prove",
                    &seq.to_string(),
                    "--size",
                    &tree.to_string(),
                ],
            );
            assert!(proved.status.success(), "{}", text(&proved));
            let proved: Value = serde_json::from_slice(&proved.stdout).unwrap();
            let d = &leaves[..tree];
            assert_eq!(proved["tree_size"], tree);
            assert_eq!(proved["leaf_hash"], hex::encode(sha256(&[&[0u8], &d[seq]])));
            assert_eq!(proved["root"], base64_of(&mth(d)));
            assert_eq!(
                proved["proof"],
                json!(hexes(&rfc_path(seq, d))),
                "seq {seq} in a tree of {tree}"
            );
        }
    }
    let proved = db.run(1, &["audit", "prove", "0"]);
    let proved: Value = serde_json::from_slice(&proved.stdout).unwrap();
    assert_eq!(
        proved["tree_size"],
        leaves.len(),
        "by default, up to the head row"
    );
    // The running signer reads only the new records and signs them.
    let grew = chain.sign(true).await.unwrap().unwrap();
    assert_eq!(grew.checkpoint.size as usize, leaves.len());

    // Before the rewrite: the copied checkpoint verifies against the chain.
    let verified = db.verify_against(1, &away, &db.vkeys[0]);
    assert!(verified.status.success(), "{}", text(&verified));

    // The owner rewrites record 1 and every record after it, and the head row: the chain
    // and head agree, so nothing in the database tells.
    rewrite_chain_as_owner(&db, 1).await;
    let plain = db.run(1, &["audit", "verify"]);
    assert!(
        plain.status.success(),
        "the chain and head alone cannot catch their owner's rewrite: {}",
        text(&plain)
    );
    // The checkpoint copied away catches it.
    let caught = db.verify_against(1, &away, &db.vkeys[0]);
    assert_eq!(caught.status.code(), Some(1), "{}", text(&caught));
    let report: Value = serde_json::from_slice(&caught.stdout).unwrap();
    assert_eq!(report["checkpoint"]["consistent"], false);
    assert!(
        report["checkpoint"]["problem"]
            .as_str()
            .unwrap()
            .contains("do not hash to the checkpoint's root"),
        "{report}"
    );
    // No gateway signs over it: not one signing afresh (its latest checkpoint, in its state
    // folder and its row, no longer matches), not the running one (the last record it read
    // changed).
    let refused = db.run(1, &["audit", "checkpoint"]);
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        text(&refused).contains("no longer holds the")
            && text(&refused).contains("no checkpoint signed"),
        "{}",
        text(&refused)
    );
    let stopped = chain.sign(false).await.unwrap_err().to_string();
    assert!(
        stopped.contains("no longer hashes to") && stopped.contains("no checkpoint signed"),
        "{stopped}"
    );
    drop((chain, store));
    db.drop_database().await;
}

fn base64_of(hash: &[u8; 32]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(hash)
}
