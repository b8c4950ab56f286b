//! The reservation handlers: the action-record contract and the faulty variants.

use super::store::{ReservationHandler, SessionRecords};
use super::types::{Reference, ReservationRequest};
use retrysim_sim::sqlite::{execute_cached, Stop};
use retrysim_sim::{Ctx, Reply, Status};
use rusqlite::{params, Connection, OptionalExtension};

/// An action record: its slot, state and reservation reference.
struct Record {
    slot: String,
    state: String,
    reference: Option<String>,
}

/// The record under (tenant, request id), or under the request id alone when not `scoped`.
fn record(
    db: &Connection,
    request: &ReservationRequest,
    scoped: bool,
) -> rusqlite::Result<Option<Record>> {
    let read = |row: &rusqlite::Row<'_>| {
        Ok(Record {
            slot: row.get(0)?,
            state: row.get(1)?,
            reference: row.get(2)?,
        })
    };
    if scoped {
        db.prepare_cached(
            "SELECT slot, state, reservation_ref FROM action_records \
             WHERE tenant = ?1 AND request_id = ?2",
        )?
        .query_row(params![request.tenant, request.request_id], read)
        .optional()
    } else {
        db.prepare_cached(
            "SELECT slot, state, reservation_ref FROM action_records \
             WHERE request_id = ?1 ORDER BY rowid LIMIT 1",
        )?
        .query_row(params![request.request_id], read)
        .optional()
    }
}

/// The answer a submission gets for an existing record.
fn answer(record: Record, request: &ReservationRequest) -> Reply<Reference> {
    if record.slot != request.slot {
        return Reply::KeyReuse;
    }
    match (record.state.as_str(), record.reference) {
        ("completed", Some(reference)) => Reply::Replayed(Reference(reference)),
        _ => Reply::Pending,
    }
}

/// The status a lookup answers for a record: the request id is bound to its slot, so a
/// lookup with another slot is a conflict, not the other action's result.
fn status(record: Option<Record>, request: &ReservationRequest) -> Status<Reference> {
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
fn reserve(db: &Connection, request: &ReservationRequest) -> rusqlite::Result<Reference> {
    let reference: String = db
        .prepare_cached("SELECT 'rsv-' || (count(*) + 1) FROM reservations")?
        .query_row([], |row| row.get(0))?;
    db.prepare_cached("INSERT INTO reservations VALUES (?1, ?2, ?3)")?
        .execute(params![reference, request.tenant, request.slot])?;
    Ok(Reference(reference))
}

fn insert_completed(
    db: &Connection,
    request: &ReservationRequest,
    reference: &Reference,
) -> rusqlite::Result<()> {
    db.prepare_cached("INSERT INTO action_records VALUES (?1, ?2, ?3, 'completed', ?4)")?
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
fn submit_with_record(
    ctx: &mut Ctx<'_>,
    db: &Connection,
    request: &ReservationRequest,
    split: bool,
) -> Result<Reply<Reference>, Stop> {
    ctx.point("before-begin")?;
    execute_cached(db, "BEGIN IMMEDIATE")?;
    let saved = record(db, request, true)?;
    ctx.point("after-lookup")?;
    if let Some(saved) = saved {
        execute_cached(db, "COMMIT")?;
        return Ok(answer(saved, request));
    }
    let reference = reserve(db, request)?;
    ctx.point("after-reservation")?;
    if split {
        execute_cached(db, "COMMIT")?;
        ctx.point("between-commits")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
    }
    insert_completed(db, request, &reference)?;
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
