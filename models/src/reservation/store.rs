//! The reservation store on real SQLite, and the family that makes any
//! [`ReservationHandler`] a system under test.

use super::types::{Fixture, Reference, ReservationRequest};
use super::workload::{workload, WORKLOAD_LIMITS};
use retrysim_sim::sqlite::{column_strings, settle, settle_lookup, HarnessDb, Stop};
use retrysim_sim::{
    Bounds, Clock, Crash, Ctx, Deadline, Decider, IntentId, IntentTag, Invariant, Reply, Session,
    Situation, Status, StoreCopy, StoreKind, System, Violation, Workload, WorkloadLimits,
};
use rusqlite::{params, Connection, OptionalExtension};
use std::collections::BTreeMap;

/// The schema of the seed's fixture: no capacity rule, so a duplicate stays visible.
pub const SCHEMA: &str = "
CREATE TABLE reservations (
    reference TEXT PRIMARY KEY NOT NULL,
    tenant TEXT NOT NULL,
    slot TEXT NOT NULL
);
CREATE TABLE action_records (
    tenant TEXT NOT NULL,
    request_id TEXT NOT NULL,
    slot TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('pending', 'completed')),
    reservation_ref TEXT,
    -- A pending record's owner holds it until then (simulated ms, as `retrysim_now()`);
    -- NULL: for ever.
    lease_expires_ms INTEGER,
    PRIMARY KEY (tenant, request_id)
);
";

/// How long the owner of a pending action record (e.g. the seeded one, an action in progress
/// elsewhere) holds it, in simulated milliseconds from the start of the run: after that the
/// owner is taken to be gone, and a submission under the same id may take the action over.
pub const PENDING_LEASE_MS: u64 = 1_500;

const RESET: &[&str] = &["DELETE FROM action_records", "DELETE FROM reservations"];

/// The invariants that apply to the reservation domain.
pub const INVARIANTS: &[Invariant] = &[
    Invariant::AtMostOnceEffect,
    Invariant::OutcomeAgreement,
    Invariant::NoSilentKeyReuse,
    Invariant::ReplayFidelity,
    Invariant::TruthfulReply,
    Invariant::ScopeIsolation,
    Invariant::EffectRecordAtomicity,
    Invariant::EventualVerdict,
];

/// Server memory that a handler keeps per client session: (session, tenant, request id) to
/// the reference it answered. A reconnect starts a new session; a crash loses it all.
pub type SessionRecords = BTreeMap<(Session, &'static str, String), Reference>;

/// The durable side of the domain: the SQLite database and the server's connection.
pub struct ReservationStore {
    db: HarnessDb,
    clock: Clock,
}

impl ReservationStore {
    /// The harness database; its keeper connection reads committed state.
    pub fn db(&self) -> &HarnessDb {
        &self.db
    }

    /// How many reservations are committed.
    pub fn reservations(&self) -> i64 {
        self.db
            .keeper()
            .query_row("SELECT count(*) FROM reservations", [], |row| row.get(0))
            .expect("reservations are readable")
    }

    /// The state of the action record under (tenant, request id), if any.
    pub fn record_state(&self, tenant: &str, request_id: &str) -> Option<String> {
        self.record(tenant, request_id).map(|record| record.state)
    }

    /// The action record under (tenant, request id), if any: its state and its owner's lease.
    pub fn record(&self, tenant: &str, request_id: &str) -> Option<RecordSeen> {
        self.db
            .keeper()
            .prepare_cached(
                "SELECT state, lease_expires_ms FROM action_records \
                 WHERE tenant = ?1 AND request_id = ?2",
            )
            .and_then(|mut s| {
                s.query_row(params![tenant, request_id], |row| {
                    Ok(RecordSeen {
                        state: row.get(0)?,
                        lease_expires_ms: row.get(1)?,
                        clock: self.clock.clone(),
                    })
                })
                .optional()
            })
            .expect("action records are readable")
    }
}

/// An action record as the harness saw it before an invocation.
#[derive(Clone, Debug)]
pub struct RecordSeen {
    /// `pending` or `completed`.
    pub state: String,
    /// When its owner's lease ends, in simulated ms; `None`: it never does.
    pub lease_expires_ms: Option<u64>,
    /// The run's clock.
    clock: Clock,
}

impl RecordSeen {
    /// Whether the owner holds the record now: no lease, or one not yet ended.
    pub fn held_now(&self) -> bool {
        self.lease_expires_ms
            .is_none_or(|expires_ms| expires_ms > self.clock.now_ms())
    }
}

/// A reservation handler: submission and status lookup on the server's connection.
pub trait ReservationHandler {
    /// Submits a reservation; call `ctx.point(name)?` at crash points.
    fn submit(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        memory: &mut SessionRecords,
        request: &ReservationRequest,
    ) -> Result<Reply<Reference>, Stop>;

    /// Looks the status of `request` up in the caller's scope.
    fn lookup(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        memory: &mut SessionRecords,
        request: &ReservationRequest,
    ) -> Result<Status<Reference>, Stop>;

    /// Whether the handler keeps durable action records at all.
    fn keeps_records(&self) -> bool {
        true
    }
}

/// A [`ReservationHandler`] as a system under test.
#[derive(Clone, Copy, Debug, Default)]
pub struct OnReservation<H>(pub H);

impl<H: ReservationHandler> StoreKind for OnReservation<H> {
    type Request = ReservationRequest;
    type Value = Reference;
    type Store = ReservationStore;
    type Memory = SessionRecords;
    type Event = Fixture;
    /// The record under the intent's first request id, before the invocation.
    type Observation = Option<RecordSeen>;

    fn open(&self, tag: &IntentTag) -> ReservationStore {
        let db = HarnessDb::create(tag, SCHEMA, &["reservations"]).expect("the schema loads");
        ReservationStore {
            db,
            clock: tag.clock().clone(),
        }
    }

    fn reset(&self, store: &mut ReservationStore) {
        store.db.reset(RESET).expect("the reservation store resets");
    }

    fn restart(&self, store: &mut ReservationStore) {
        store.db.restart_server();
    }

    /// Its database's commits (and, for a provider, its charges) are all it changes
    /// durably, and the harness reports each.
    fn reports_durable_changes(&self) -> bool {
        true
    }

    fn store_version(&self, store: &ReservationStore) -> Option<u64> {
        Some(store.db.version())
    }

    /// Every connection of the harness's database asks whether its COMMIT fails.
    fn storage_faults_possible(&self) -> bool {
        true
    }

    fn save(&self, store: &ReservationStore) -> Option<StoreCopy> {
        Some(StoreCopy::new(store.db.save()))
    }

    fn restore(&self, store: &mut ReservationStore, copy: &StoreCopy) {
        store
            .db
            .restore(copy.get().expect("a copy of the reservation database"));
    }

    fn apply_event(&self, store: &mut ReservationStore, fixture: &Fixture) {
        let Fixture::Pending {
            tenant,
            request_id,
            slot,
        } = *fixture;
        store
            .db
            .keeper()
            .execute(
                "INSERT INTO action_records VALUES (?1, ?2, ?3, 'pending', NULL, ?4)",
                params![tenant, request_id, slot, PENDING_LEASE_MS],
            )
            .expect("the pending fixture inserts");
    }

    /// The end of each pending record's lease: from then on a submission may take the action
    /// over.
    fn deadlines(&self, store: &ReservationStore) -> Vec<Deadline> {
        let keeper = store.db.keeper();
        let mut statement = keeper
            .prepare_cached(
                "SELECT lease_expires_ms, tenant || '/' || request_id FROM action_records \
                 WHERE state = 'pending' AND lease_expires_ms IS NOT NULL",
            )
            .expect("action records are readable");
        let leases = statement
            .query_map([], |row| {
                Ok(Deadline {
                    at_ms: row.get(0)?,
                    what: format!("the lease on {} ends", row.get::<_, String>(1)?),
                })
            })
            .expect("action records are readable");
        leases.map(|lease| lease.expect("a lease reads")).collect()
    }

    fn observe(
        &self,
        store: &ReservationStore,
        request: &ReservationRequest,
    ) -> Option<RecordSeen> {
        store.record(request.tenant, &request.first_id)
    }

    fn has_record(&self, store: &ReservationStore, request: &ReservationRequest) -> Option<bool> {
        self.0.keeps_records().then(|| {
            store
                .record_state(request.tenant, &request.request_id)
                .is_some()
        })
    }

    /// Whether the intent's own record (its tenant, first request id and slot) is pending.
    fn is_pending(&self, store: &ReservationStore, request: &ReservationRequest) -> bool {
        store
            .db
            .keeper()
            .prepare_cached(
                "SELECT count(*) FROM action_records \
                 WHERE tenant = ?1 AND request_id = ?2 AND slot = ?3 AND state = 'pending'",
            )
            .and_then(|mut s| {
                s.query_row(
                    params![request.tenant, request.first_id, request.slot],
                    |row| row.get::<_, i64>(0),
                )
            })
            .expect("action records are readable")
            > 0
    }

    /// A connection per invocation, so that overlapping invocations race for real.
    fn connect(&self, store: &ReservationStore) -> Option<Connection> {
        Some(
            store
                .db
                .connect()
                .expect("a connection to the reservation store opens"),
        )
    }

    fn effects(&self, store: &ReservationStore) -> Vec<IntentId> {
        store.db.effects()
    }

    fn fingerprint(&self, store: &ReservationStore) -> u64 {
        store.db.fingerprint(&["reservations", "action_records"])
    }

    fn describe_store(&self, store: &ReservationStore) -> String {
        let keeper = store.db.keeper();
        let read = |sql: &str| column_strings(keeper, sql);
        let reservations = read(
            "SELECT reference || ' ' || tenant || ' ' || slot FROM reservations ORDER BY rowid",
        );
        let records = read(
            "SELECT tenant || '/' || request_id || ' ' || state || coalesce(' ' || reservation_ref, '') \
             || CASE WHEN state = 'pending' THEN coalesce(' (lease to ' || lease_expires_ms || ' ms)', '') ELSE '' END \
             FROM action_records ORDER BY tenant, request_id",
        );
        format!(
            "reservations [{}]; records [{}]",
            reservations.join(", "),
            records.join(", ")
        )
    }
}

impl<H: ReservationHandler> System for OnReservation<H> {
    fn workload(
        &self,
        decider: &mut Decider<'_>,
        bounds: &Bounds,
    ) -> Workload<ReservationRequest, Fixture> {
        workload(decider, bounds)
    }

    fn judge(
        &self,
        observed: &Option<RecordSeen>,
        request: &ReservationRequest,
        _reply: &Reply<Reference>,
        committed: bool,
    ) -> Vec<Violation> {
        // Judged when the invocation answers: in a sequential run that is when it ran; an
        // invocation that overlaps others may have committed a little earlier.
        let held_pending = observed
            .as_ref()
            .is_some_and(|record| record.state == "pending" && record.held_now());
        if committed && held_pending {
            return vec![Violation {
                invariant: Invariant::AtMostOnceEffect,
                detail: format!(
                    "reserved although {} {} was pending and its owner still held it: a pending action turned into a second reservation",
                    request.tenant, request.first_id
                ),
            }];
        }
        Vec::new()
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut ReservationStore,
        memory: &mut SessionRecords,
        request: &ReservationRequest,
    ) -> Result<Reply<Reference>, Crash> {
        let result = self.0.submit(ctx, store.db.server(), memory, request);
        settle(result, store.db.server())
    }

    /// Handles a submission on the invocation's own connection, with a session memory of its
    /// own (empty: memory kept per session does not cross invocations that overlap).
    fn handle_on(
        &self,
        ctx: &mut Ctx<'_>,
        _store: &ReservationStore,
        connection: &Connection,
        request: &ReservationRequest,
    ) -> Result<Reply<Reference>, Crash> {
        let mut memory = SessionRecords::new();
        let result = self.0.submit(ctx, connection, &mut memory, request);
        settle(result, connection)
    }

    fn supports_lookup(&self) -> bool {
        true
    }

    fn lookup(
        &self,
        ctx: &mut Ctx<'_>,
        store: &mut ReservationStore,
        memory: &mut SessionRecords,
        request: &ReservationRequest,
    ) -> Result<Status<Reference>, Crash> {
        let server = store.db.server();
        settle_lookup(self.0.lookup(ctx, server, memory, request), server)
    }

    fn invariants(&self) -> &'static [Invariant] {
        INVARIANTS
    }

    fn situations(&self) -> &'static [Situation] {
        &[Situation::KEY_REUSED, Situation::REQUEST_ID_IN_TWO_SCOPES]
    }

    fn workload_limits(&self) -> WorkloadLimits {
        WORKLOAD_LIMITS
    }
}
