//! The interval store on real SQLite, and the family that makes any [`IntervalHandler`] a
//! system under test.

use super::types::{AdminEvent, EditResult, Identity, IntervalRequest, Principal, ToolArgs};
use super::types::{Arg, TOOL, WRITE_SCOPE};
use super::workload::{self, workload};
use retrysim_sim::sqlite::{execute_cached, settle, DbImage, HarnessDb, Retention, Stop};
use retrysim_sim::{
    Bounds, Crash, Ctx, Deadline, Decider, IntentId, IntentTag, Invariant, Reply, Request,
    Situation, StoreCopy, StoreKind, System, Violation, Workload, WorkloadLimits,
};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};

/// The schema and fixture rows of the seed's example.
pub const SCHEMA: &str = "
CREATE TABLE automations (
    id INTEGER PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    interval_minutes INTEGER NOT NULL,
    version INTEGER NOT NULL
);
CREATE TABLE receipts (
    workspace_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    tool TEXT NOT NULL,
    request_id TEXT NOT NULL,
    payload TEXT NOT NULL,
    response TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (workspace_id, user_id, tool, request_id)
);
INSERT INTO automations VALUES (1, 'team-a', 15, 1), (2, 'team-a', 15, 1), (20, 'team-b', 15, 1);
";

const RESET: &[&str] = &[
    "DELETE FROM receipts",
    "DELETE FROM automations",
    "INSERT INTO automations VALUES (1, 'team-a', 15, 1), (2, 'team-a', 15, 1), (20, 'team-b', 15, 1)",
];

/// The invariants that apply to the interval domain: all but `no-orphan-effect` (its effects
/// are its store's own).
pub const INVARIANTS: &[Invariant] = &[
    Invariant::AtMostOnceEffect,
    Invariant::OutcomeAgreement,
    Invariant::NoSilentKeyReuse,
    Invariant::ReplayFidelity,
    Invariant::TruthfulReply,
    Invariant::NoLostUpdate,
    Invariant::AccessBeforeReplay,
    Invariant::ScopeIsolation,
    Invariant::EffectRecordAtomicity,
    Invariant::NoDeadlock,
    Invariant::EventualVerdict,
];

const WRITE: &[&str] = &[WRITE_SCOPE];
const NO_SCOPES: &[&str] = &[];

/// The durable side of the interval domain: the SQLite database, the server's connection, and
/// the identity directory's revocations.
pub struct IntervalStore {
    db: HarnessDb,
    revoked: BTreeSet<&'static str>,
    /// Changes to `revoked` so far (with the database's version, the store's version).
    revocations_changed: u64,
}

impl IntervalStore {
    /// The harness database; its keeper connection reads committed state.
    pub fn db(&self) -> &HarnessDb {
        &self.db
    }

    /// Resolves `identity` to a principal with its current scopes.
    pub fn principal(&self, identity: Identity) -> Principal {
        let scopes = if self.revoked.contains(identity.user_id) {
            NO_SCOPES
        } else {
            WRITE
        };
        Principal { identity, scopes }
    }

    /// One integer read from committed state, e.g. `SELECT count(*) FROM receipts`.
    pub fn query_i64(&self, sql: &str) -> i64 {
        self.db
            .keeper()
            .query_row(sql, [], |row| row.get(0))
            .unwrap_or_else(|error| panic!("{sql}: {error}"))
    }

    fn in_workspace(&self, automation_id: i64, workspace_id: &str) -> bool {
        self.db
            .keeper()
            .prepare_cached("SELECT 1 FROM automations WHERE id = ?1 AND workspace_id = ?2")
            .and_then(|mut s| {
                s.query_row(params![automation_id, workspace_id], |_| Ok(()))
                    .optional()
            })
            .expect("automations are readable")
            .is_some()
    }
}

/// A handler of `set_interval`: given the server's connection, the resolved principal and the
/// raw arguments. Return [`Stop`] errors with `?`; the family settles them.
pub trait IntervalHandler {
    /// Handles one call; call `ctx.point(name)?` at crash points.
    fn set_interval(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        principal: &Principal,
        args: &ToolArgs,
    ) -> Result<Reply<EditResult>, Stop>;

    /// Handles one call with the server's memory between requests, `memory`: a handler that
    /// keeps a cache implements this, and its [`IntervalHandler::set_interval`] serves with an
    /// empty one (as an invocation beside another does). By default the handler keeps
    /// nothing: [`IntervalHandler::set_interval`].
    fn set_interval_with(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        memory: &mut Cache,
        principal: &Principal,
        args: &ToolArgs,
    ) -> Result<Reply<EditResult>, Stop> {
        let _ = memory;
        self.set_interval(ctx, db, principal, args)
    }

    /// Whether the handler keeps receipts at all (so that a missing one is a lost record).
    fn keeps_receipts(&self) -> bool {
        true
    }

    /// How long a receipt is kept, in simulated milliseconds from its creation: a store-side
    /// job purges it then. `None` keeps receipts for ever.
    fn retention_ms(&self) -> Option<u64> {
        None
    }

    /// Whether every answer is a verdict (applied, replayed, key reuse, refused, denied)
    /// unless a storage fault stops the handler: the family then says so to the engine
    /// ([`retrysim_sim::System::answers_only_verdicts`]), which hashes fewer states, and
    /// holds it to that. `false` by default: a handler whose SQL can fail by itself (a query
    /// that finds no row) is answered `unavailable`, which is no verdict.
    fn answers_only_verdicts(&self) -> bool {
        false
    }
}

/// Server memory an interval handler keeps between requests ([`IntervalHandler::set_interval_with`]):
/// text by key, e.g. a cache of saved responses. It is lost when the server crashes, and an
/// invocation that runs beside another starts from an empty one.
pub type Cache = BTreeMap<String, String>;

/// An [`IntervalHandler`] as a system under test.
#[derive(Clone, Copy, Debug, Default)]
pub struct OnInterval<H>(pub H);

impl<H: IntervalHandler> OnInterval<H> {
    /// How the handler's receipts expire, if they do.
    fn retention(&self) -> Option<Retention> {
        Some(Retention {
            table: "receipts",
            row_name: "'receipt ' || workspace_id || '/' || user_id || '/' || request_id",
            retention_ms: self.0.retention_ms()?,
        })
    }
}

/// What the harness saw in the committed store just before an invocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Observed {
    /// Whether the caller had write scope and the automation was in its workspace.
    pub access: bool,
    /// The automation's version by the ground truth (1, plus one per committed edit), if it
    /// was in the caller's workspace.
    pub version: Option<i64>,
}

fn int(arg: &Arg) -> Option<i64> {
    match arg {
        Arg::Int(value) => Some(*value),
        _ => None,
    }
}

impl<H: IntervalHandler> StoreKind for OnInterval<H> {
    type Request = IntervalRequest;
    type Value = EditResult;
    type Store = IntervalStore;
    type Memory = Cache;
    type Event = AdminEvent;
    type Observation = Observed;

    fn open(&self, tag: &IntentTag) -> IntervalStore {
        let db = HarnessDb::create(tag, SCHEMA, &["automations"]).expect("the schema loads");
        IntervalStore {
            db,
            revoked: BTreeSet::new(),
            revocations_changed: 0,
        }
    }

    fn reset(&self, store: &mut IntervalStore) {
        store.db.reset(RESET).expect("the interval store resets");
        store.revoked.clear();
        store.revocations_changed += 1;
    }

    fn restart(&self, store: &mut IntervalStore) {
        store.db.restart_server();
    }

    /// Its database's commits (and, for a provider, its charges) are all it changes
    /// durably, and the harness reports each.
    fn reports_durable_changes(&self) -> bool {
        true
    }

    /// The interval store keeps no pending records and no records of outside effects.
    fn judges_records(&self) -> bool {
        false
    }

    fn store_version(&self, store: &IntervalStore) -> Option<u64> {
        // Both counts only grow, so their sum moves whenever either does.
        Some(store.db.version() + store.revocations_changed)
    }

    /// Every connection of the harness's database asks whether its COMMIT fails.
    fn storage_faults_possible(&self) -> bool {
        true
    }

    fn save(&self, store: &IntervalStore) -> Option<StoreCopy> {
        Some(StoreCopy::new((store.db.save(), store.revoked.clone())))
    }

    fn restore(&self, store: &mut IntervalStore, copy: &StoreCopy) {
        let (image, revoked) = copy
            .get::<(DbImage, BTreeSet<&'static str>)>()
            .expect("a copy of the interval store");
        store.db.restore(image);
        store.revoked.clone_from(revoked);
        store.revocations_changed += 1;
    }

    fn apply_event(&self, store: &mut IntervalStore, event: &AdminEvent) {
        let keeper = store.db.keeper();
        let changed = match *event {
            AdminEvent::Revoke { user_id } => {
                store.revoked.insert(user_id);
                store.revocations_changed += 1;
                Ok(1)
            }
            AdminEvent::Move {
                automation_id,
                workspace_id,
            } => keeper.execute(
                "UPDATE automations SET workspace_id = ?2 WHERE id = ?1",
                params![automation_id, workspace_id],
            ),
            AdminEvent::Delete { automation_id } => {
                keeper.execute("DELETE FROM automations WHERE id = ?1", [automation_id])
            }
        };
        changed.expect("an admin change applies");
    }

    // The version is the harness's own count: 1, plus one for every committed edit of the
    // automation by the ground truth, never the handler's `version` column.
    fn observe(&self, store: &IntervalStore, request: &IntervalRequest) -> Observed {
        let principal = store.principal(request.identity);
        let version = int(&request.args.automation_id)
            .filter(|&id| store.in_workspace(id, request.identity.workspace_id))
            .map(|id| 1 + store.db.effects_on("automations", id) as i64);
        Observed {
            access: principal.can_write() && version.is_some(),
            version,
        }
    }

    fn has_record(&self, store: &IntervalStore, request: &IntervalRequest) -> Option<bool> {
        if !self.0.keeps_receipts() {
            return None;
        }
        let found: Option<i64> = store
            .db
            .keeper()
            .prepare_cached(
                "SELECT 1 FROM receipts WHERE workspace_id = ?1 AND user_id = ?2 AND tool = ?3 AND request_id = ?4",
            )
            .and_then(|mut s| {
                s.query_row(
                    params![
                        request.identity.workspace_id,
                        request.identity.user_id,
                        TOOL,
                        request.request_id()
                    ],
                    |row| row.get(0),
                )
                .optional()
            })
            .expect("receipts are readable");
        Some(found.is_some())
    }

    fn connect(&self, store: &IntervalStore) -> Option<Connection> {
        Some(
            store
                .db
                .connect()
                .expect("a connection to the interval store opens"),
        )
    }

    fn effects(&self, store: &IntervalStore) -> Vec<IntentId> {
        store.db.effects()
    }

    fn fingerprint(&self, store: &IntervalStore) -> u64 {
        let mut hasher = retrysim_sim::StateHasher::default();
        // A receipt's creation time matters only through its expiry, which `deadlines` tells
        // relative to now.
        store
            .db
            .fingerprint_of(&[
                "SELECT * FROM automations ORDER BY id",
                "SELECT workspace_id, user_id, tool, request_id, payload, response FROM receipts \
                 ORDER BY workspace_id, user_id, tool, request_id, rowid",
            ])
            .hash(&mut hasher);
        store.revoked.hash(&mut hasher);
        hasher.finish()
    }

    fn describe_store(&self, store: &IntervalStore) -> String {
        let keeper = store.db.keeper();
        let mut rows = keeper
            .prepare_cached(
                "SELECT id, workspace_id, interval_minutes, version FROM automations ORDER BY id",
            )
            .expect("automations are readable");
        let automations: Vec<String> = rows
            .query_map([], |row| {
                Ok(format!(
                    "#{} {} {}min v{}",
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, i64>(2)?,
                    row.get::<_, i64>(3)?
                ))
            })
            .expect("automations are readable")
            .map(|row| row.expect("a row reads"))
            .collect();
        let mut receipts = keeper
            .prepare_cached(
                "SELECT user_id || '@' || workspace_id || ':' || request_id FROM receipts ORDER BY 1",
            )
            .expect("receipts are readable");
        let receipts: Vec<String> = receipts
            .query_map([], |row| row.get(0))
            .expect("receipts are readable")
            .map(|row| row.expect("a row reads"))
            .collect();
        format!(
            "{}; receipts [{}]",
            automations.join(", "),
            receipts.join(" ")
        )
    }

    fn deadlines(&self, store: &IntervalStore) -> Vec<Deadline> {
        self.retention()
            .map_or_else(Vec::new, |retention| retention.deadlines(&store.db))
    }

    fn pass_time(&self, store: &mut IntervalStore, now_ms: u64) {
        if let Some(retention) = self.retention() {
            retention.purge(&store.db, now_ms);
        }
    }
}

impl<H: IntervalHandler> System for OnInterval<H> {
    /// As the handler says ([`IntervalHandler::answers_only_verdicts`]).
    fn answers_only_verdicts(&self) -> bool {
        self.0.answers_only_verdicts()
    }

    fn workload(
        &self,
        decider: &mut Decider<'_>,
        bounds: &Bounds,
    ) -> Workload<IntervalRequest, AdminEvent> {
        workload(decider, bounds)
    }

    fn judge(
        &self,
        observed: &Observed,
        request: &IntervalRequest,
        reply: &Reply<EditResult>,
        committed: bool,
    ) -> Vec<Violation> {
        let mut found = Vec::new();
        if !observed.access && matches!(reply, Reply::Applied(_) | Reply::Replayed(_)) {
            found.push(Violation {
                invariant: Invariant::AccessBeforeReplay,
                detail: format!(
                    "answered {reply} although the caller lacked write access to #{} in {}",
                    request.args.automation_id, request.identity.workspace_id
                ),
            });
        }
        let expected = int(&request.args.expected_version);
        if committed && observed.version != expected {
            found.push(Violation {
                invariant: Invariant::NoLostUpdate,
                detail: format!(
                    "applied an edit based on version {} over version {}",
                    request.args.expected_version,
                    observed.version.map_or("none".into(), |v| v.to_string())
                ),
            });
        }
        found
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut IntervalStore,
        memory: &mut Cache,
        request: &IntervalRequest,
    ) -> Result<Reply<EditResult>, Crash> {
        let principal = store.principal(request.identity);
        let server = store.db.server();
        let result = self
            .0
            .set_interval_with(ctx, server, memory, &principal, &request.args);
        settle(result, server)
    }

    fn handle_on(
        &self,
        ctx: &mut Ctx<'_>,
        store: &IntervalStore,
        connection: &Connection,
        request: &IntervalRequest,
    ) -> Result<Reply<EditResult>, Crash> {
        let principal = store.principal(request.identity);
        let result = self
            .0
            .set_interval(ctx, connection, &principal, &request.args);
        settle(result, connection)
    }

    fn invariants(&self) -> &'static [Invariant] {
        INVARIANTS
    }

    fn situations(&self) -> &'static [Situation] {
        workload::SITUATIONS
    }

    fn exercises(
        &self,
        workload: &Workload<IntervalRequest, AdminEvent>,
        situation: &Situation,
    ) -> bool {
        workload::exercises(workload, situation)
    }

    fn workload_limits(&self) -> WorkloadLimits {
        workload::WORKLOAD_LIMITS
    }
}

/// Runs `statement` on the server's connection through its statement cache.
pub(crate) fn run(db: &Connection, statement: &str) -> Result<(), Stop> {
    execute_cached(db, statement)?;
    Ok(())
}
