//! The reservation handlers: the action-record contract and the faulty variants.

use super::store::{ReservationHandler, SessionRecords};
use super::types::{Reference, ReservationRequest};
use retrysim_sim::sqlite::{execute_cached, Stop};
use retrysim_sim::{Ctx, Reply, Status};
use rusqlite::{params, Connection, OptionalExtension};

/// An action record: its slot, state, reservation reference, and whether its owner still
/// holds it (no lease, or a lease not yet expired by `retrysim_now()`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The slot the request reserves.
    pub slot: String,
    /// `pending` or `completed`.
    pub state: String,
    /// The reservation's reference, once completed.
    pub reference: Option<String>,
    /// How long its owner's lease still runs (at most 0 once expired); `None`: no lease.
    pub lease_left_ms: Option<i64>,
}

/// The columns [`record`] reads.
pub const RECORD_COLUMNS: &str = "slot, state, reservation_ref, lease_expires_ms - retrysim_now()";

/// The record under (tenant, request id), or under the request id alone when not `scoped`.
pub fn record(
    db: &Connection,
    request: &ReservationRequest,
    scoped: bool,
) -> rusqlite::Result<Option<Record>> {
    let read = |row: &rusqlite::Row<'_>| {
        Ok(Record {
            slot: row.get(0)?,
            state: row.get(1)?,
            reference: row.get(2)?,
            lease_left_ms: row.get(3)?,
        })
    };
    if scoped {
        db.prepare_cached(&format!(
            "SELECT {RECORD_COLUMNS} FROM action_records WHERE tenant = ?1 AND request_id = ?2"
        ))?
        .query_row(params![request.tenant, request.request_id], read)
        .optional()
    } else {
        db.prepare_cached(&format!(
            "SELECT {RECORD_COLUMNS} FROM action_records \
             WHERE request_id = ?1 ORDER BY rowid LIMIT 1"
        ))?
        .query_row(params![request.request_id], read)
        .optional()
    }
}

/// What a submission does with an existing record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Found {
    /// Answer at once.
    Answer(Reply<Reference>),
    /// A pending record whose owner is gone: take the action over under the same id.
    TakeOver,
}

/// What a submission does with an existing record; `take_over` says whether a pending record
/// whose owner's lease expired may be taken over.
pub fn found(record: Record, request: &ReservationRequest, take_over: bool) -> Found {
    if record.slot != request.slot {
        return Found::Answer(Reply::KeyReuse);
    }
    match (
        record.state.as_str(),
        record.reference,
        record.lease_left_ms,
    ) {
        ("completed", Some(reference), _) => Found::Answer(Reply::Replayed(Reference(reference))),
        (_, _, Some(left_ms)) if take_over && left_ms <= 0 => Found::TakeOver,
        (_, _, Some(left_ms)) if take_over => Found::Answer(Reply::RetryAfter {
            retry_after_ms: left_ms as u64,
            why: "pending until its owner's lease ends".into(),
        }),
        _ => Found::Answer(Reply::Pending),
    }
}

/// The status a lookup answers for a record: the request id is bound to its slot, so a
/// lookup with another slot is a conflict, not the other action's result.
pub fn status(record: Option<Record>, request: &ReservationRequest) -> Status<Reference> {
    match record {
        None => Status::NotFound,
        Some(record) if record.slot != request.slot => Status::Conflict,
        Some(Record {
            reference: Some(reference),
            ..
        }) => Status::Completed(Reference(reference)),
        Some(_) => Status::Pending,
    }
}

/// Inserts a reservation and returns its reference (`rsv-N`, N one more than the count).
pub fn reserve(db: &Connection, request: &ReservationRequest) -> rusqlite::Result<Reference> {
    let reference: String = db
        .prepare_cached("SELECT 'rsv-' || (count(*) + 1) FROM reservations")?
        .query_row([], |row| row.get(0))?;
    db.prepare_cached("INSERT INTO reservations VALUES (?1, ?2, ?3)")?
        .execute(params![reference, request.tenant, request.slot])?;
    Ok(Reference(reference))
}

/// Records the action completed with `reference`: a new record, or the pending one it took
/// over.
pub fn record_completed(
    db: &Connection,
    request: &ReservationRequest,
    reference: &Reference,
) -> rusqlite::Result<()> {
    db.prepare_cached(
        "INSERT INTO action_records VALUES (?1, ?2, ?3, 'completed', ?4, NULL) \
         ON CONFLICT (tenant, request_id) DO UPDATE \
         SET state = 'completed', reservation_ref = excluded.reservation_ref, lease_expires_ms = NULL",
    )?
    .execute(params![
        request.tenant,
        request.request_id,
        request.slot,
        reference.0
    ])?;
    Ok(())
}

/// Submission under the action-record contract; `split` commits the reservation before its
/// record instead of with it.
pub fn submit_with_record(
    ctx: &mut Ctx<'_>,
    db: &Connection,
    request: &ReservationRequest,
    split: bool,
) -> Result<Reply<Reference>, Stop> {
    ctx.point("before-begin")?;
    execute_cached(db, "BEGIN IMMEDIATE")?;
    let saved = record(db, request, true)?;
    ctx.point("after-lookup")?;
    if let Some(Found::Answer(reply)) = saved.map(|saved| found(saved, request, true)) {
        execute_cached(db, "COMMIT")?;
        return Ok(reply);
    }
    let reference = reserve(db, request)?;
    ctx.point("after-reservation")?;
    if split {
        execute_cached(db, "COMMIT")?;
        ctx.point("between-commits")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
    }
    record_completed(db, request, &reference)?;
    ctx.point("before-commit")?;
    execute_cached(db, "COMMIT")?;
    ctx.point("after-commit")?;
    Ok(Reply::Applied(reference))
}

/// A handler that keeps action records, with one switch per rule of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct RecordRules {
    /// Commit the reservation before its record (breaks "they commit together").
    split_commit: bool,
    /// Look records up by request id alone (breaks "the lookup is scoped by the tenant").
    unscoped_lookup: bool,
}

impl RecordRules {
    fn submit(
        self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        request: &ReservationRequest,
    ) -> Result<Reply<Reference>, Stop> {
        submit_with_record(ctx, db, request, self.split_commit)
    }

    fn lookup(
        self,
        db: &Connection,
        request: &ReservationRequest,
    ) -> Result<Status<Reference>, Stop> {
        Ok(status(record(db, request, !self.unscoped_lookup)?, request))
    }
}

macro_rules! record_handler {
    ($(#[$doc:meta])* $name:ident, $rules:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl ReservationHandler for $name {
            fn submit(
                &self,
                ctx: &mut Ctx<'_>,
                db: &Connection,
                _memory: &mut SessionRecords,
                request: &ReservationRequest,
            ) -> Result<Reply<Reference>, Stop> {
                $rules.submit(ctx, db, request)
            }

            fn lookup(
                &self,
                _ctx: &mut Ctx<'_>,
                db: &Connection,
                _memory: &mut SessionRecords,
                request: &ReservationRequest,
            ) -> Result<Status<Reference>, Stop> {
                $rules.lookup(db, request)
            }
        }
    };
}

record_handler!(
    /// `action-record` (correct): the reservation and its completed action record in one
    /// `BEGIN IMMEDIATE` transaction; the lookup is scoped by the tenant.
    ActionRecord,
    RecordRules {
        split_commit: false,
        unscoped_lookup: false,
    }
);

record_handler!(
    /// `split-commit` (faulty): breaks "the reservation and its record commit together"; the
    /// reservation commits first, so a crash between the commits leaves a reservation that
    /// the lookup calls `not_found`, and the retry reserves again (`effect-record-atomicity`).
    SplitCommit,
    RecordRules {
        split_commit: true,
        unscoped_lookup: false,
    }
);

record_handler!(
    /// `unscoped-lookup` (faulty): breaks "the lookup is scoped by the tenant"; it finds a
    /// record by request id alone, so another tenant's lookup discloses this tenant's
    /// reservation (`scope-isolation`).
    UnscopedLookup,
    RecordRules {
        split_commit: false,
        unscoped_lookup: true,
    }
);

/// `session-memory` (faulty): remembers success only in the session's memory, with no durable
/// action record. After a reconnect the new session finds nothing, the lookup answers
/// `not_found`, and the resubmission reserves again (`at-most-once-effect`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SessionMemory;

fn session_key(
    ctx: &Ctx<'_>,
    request: &ReservationRequest,
) -> (retrysim_sim::Session, &'static str, String) {
    (
        ctx.session(),
        request.tenant,
        request.request_id.to_string(),
    )
}

impl ReservationHandler for SessionMemory {
    fn submit(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        memory: &mut SessionRecords,
        request: &ReservationRequest,
    ) -> Result<Reply<Reference>, Stop> {
        let key = session_key(ctx, request);
        if let Some(reference) = memory.get(&key) {
            return Ok(Reply::Replayed(reference.clone()));
        }
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let reference = reserve(db, request)?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        memory.insert(key, reference.clone());
        Ok(Reply::Applied(reference))
    }

    fn lookup(
        &self,
        ctx: &mut Ctx<'_>,
        _db: &Connection,
        memory: &mut SessionRecords,
        request: &ReservationRequest,
    ) -> Result<Status<Reference>, Stop> {
        Ok(match memory.get(&session_key(ctx, request)) {
            Some(reference) => Status::Completed(reference.clone()),
            None => Status::NotFound,
        })
    }

    fn keeps_records(&self) -> bool {
        false
    }
}

/// `stuck-pending` (faulty): claims the action with a pending record in a transaction of its
/// own, then reserves and completes the record in a second one. The claim holds no lease, so
/// a crash between the two leaves the record pending for ever, and so does the seeded
/// pending record whose owner is gone: no later attempt takes either over, and every retry is
/// answered `pending` until the client's retry horizon ends (`eventual-verdict`).
#[derive(Clone, Copy, Debug, Default)]
pub struct StuckPending;

/// Claims the action (a pending record with no lease), commits, then reserves and completes.
fn submit_claim_first(
    ctx: &mut Ctx<'_>,
    db: &Connection,
    request: &ReservationRequest,
) -> Result<Reply<Reference>, Stop> {
    ctx.point("before-begin")?;
    execute_cached(db, "BEGIN IMMEDIATE")?;
    if let Some(saved) = record(db, request, true)? {
        execute_cached(db, "COMMIT")?;
        return Ok(match found(saved, request, false) {
            Found::Answer(reply) => reply,
            Found::TakeOver => Reply::Pending,
        });
    }
    db.prepare_cached("INSERT INTO action_records VALUES (?1, ?2, ?3, 'pending', NULL, NULL)")?
        .execute(params![request.tenant, request.request_id, request.slot])?;
    execute_cached(db, "COMMIT")?;
    ctx.point("after-claim")?;
    execute_cached(db, "BEGIN IMMEDIATE")?;
    let reference = reserve(db, request)?;
    record_completed(db, request, &reference)?;
    ctx.point("before-commit")?;
    execute_cached(db, "COMMIT")?;
    ctx.point("after-commit")?;
    Ok(Reply::Applied(reference))
}

impl ReservationHandler for StuckPending {
    fn submit(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        _memory: &mut SessionRecords,
        request: &ReservationRequest,
    ) -> Result<Reply<Reference>, Stop> {
        submit_claim_first(ctx, db, request)
    }

    fn lookup(
        &self,
        _ctx: &mut Ctx<'_>,
        db: &Connection,
        _memory: &mut SessionRecords,
        request: &ReservationRequest,
    ) -> Result<Status<Reference>, Stop> {
        Ok(status(record(db, request, true)?, request))
    }
}
