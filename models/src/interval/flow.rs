//! The receipt contract as one flow with its rules spelled out, and the faulty handlers, each
//! breaking exactly one rule.

use super::store::{run, IntervalHandler};
use super::types::{Arg, EditResult, Principal, ToolArgs, TOOL};
use super::types::{NOT_PERMITTED, UNAVAILABLE, VERSION_CONFLICT};
use retrysim_sim::sqlite::Stop;
use retrysim_sim::{Ctx, Reply};
use rusqlite::{params, Connection, OptionalExtension};

/// The rules of the receipt contract. [`Rules::RECEIPT`] keeps all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rules {
    /// Keep receipts at all.
    pub receipts: bool,
    /// Check current access before looking up a receipt.
    pub access_before_receipt: bool,
    /// Look up the receipt before the version condition.
    pub receipt_before_version: bool,
    /// Key receipts by (workspace, user, tool, request id), not the request id alone.
    pub scoped_key: bool,
    /// Replay only when the saved payload matches; otherwise refuse as key reuse.
    pub payload_check: bool,
    /// Condition the update on the expected version.
    pub versioned_update: bool,
    /// Commit the row change and its receipt in one transaction.
    pub one_transaction: bool,
    /// Check access and look up the receipt inside the write transaction, so that nothing
    /// changes between what the lookup saw and the write.
    pub lookup_in_write_transaction: bool,
    /// How long a receipt is kept, in simulated milliseconds from its creation (a store-side
    /// job purges it then); `None` for ever.
    pub retention_ms: Option<u64>,
}

/// How long `receipt` keeps a receipt: a day, far past the clients' retry horizon.
pub const RETENTION_MS: u64 = 86_400_000;

/// How long `short-retention` keeps a receipt: half the clients' timeout, shorter than their
/// retry horizon.
pub const SHORT_RETENTION_MS: u64 = 500;

impl Rules {
    /// Every rule kept: the correct `receipt` handler.
    pub const RECEIPT: Rules = Rules {
        receipts: true,
        access_before_receipt: true,
        receipt_before_version: true,
        scoped_key: true,
        payload_check: true,
        versioned_update: true,
        one_transaction: true,
        lookup_in_write_transaction: true,
        retention_ms: Some(RETENTION_MS),
    };
}

/// Validated arguments of one call: what [`validate`] makes of a principal and its tool
/// arguments, and what the other steps of the receipt contract take.
#[derive(Clone, Copy, Debug)]
pub struct Call<'a> {
    /// Who calls.
    pub principal: &'a Principal,
    /// The request id, 1-64 letters, digits or `-`.
    pub request_id: &'a str,
    /// The automation to change.
    pub automation_id: i64,
    /// The version the caller based its edit on.
    pub expected_version: i64,
    /// The new interval, 5-1440 minutes.
    pub interval_minutes: i64,
}

impl Call<'_> {
    /// The canonical payload the receipt binds the key to: the three integers, sorted keys.
    pub fn payload(&self) -> String {
        format!(
            "{{\"id\":{},\"interval\":{},\"version\":{}}}",
            self.automation_id, self.interval_minutes, self.expected_version
        )
    }
}

/// A definite refusal, e.g. [`VERSION_CONFLICT`].
pub fn refused(why: &'static str) -> Reply<EditResult> {
    Reply::Refused(why.into())
}

/// A refusal for lack of current access, e.g. [`UNAVAILABLE`].
pub fn denied(why: &'static str) -> Reply<EditResult> {
    Reply::Denied(why.into())
}

fn positive(arg: &Arg) -> Option<i64> {
    match arg {
        Arg::Int(value) if *value >= 1 => Some(*value),
        _ => None,
    }
}

fn valid_request_id(arg: &Arg) -> Option<&str> {
    match arg {
        Arg::Text(text)
            if (1..=64).contains(&text.len())
                && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
        {
            Some(text)
        }
        _ => None,
    }
}

/// Validation first, before anything is read or written: write scope, request id, positive
/// integer id and version, interval 5-1440. Its `Err` is the reply to give.
pub fn validate<'a>(
    principal: &'a Principal,
    args: &'a ToolArgs,
) -> Result<Call<'a>, Reply<EditResult>> {
    if !principal.can_write() {
        return Err(denied(NOT_PERMITTED));
    }
    let request_id = valid_request_id(&args.request_id).ok_or_else(|| {
        refused("invalid argument: request id must be 1-64 letters, digits, or -")
    })?;
    let (Some(automation_id), Some(expected_version)) = (
        positive(&args.automation_id),
        positive(&args.expected_version),
    ) else {
        return Err(refused(
            "invalid argument: id and version must be positive integers",
        ));
    };
    let interval_minutes = match args.interval_minutes {
        Arg::Int(minutes) if (5..=1440).contains(&minutes) => minutes,
        _ => {
            return Err(refused(
                "invalid argument: illustrative interval range is 5-1440 minutes",
            ))
        }
    };
    Ok(Call {
        principal,
        request_id,
        automation_id,
        expected_version,
        interval_minutes,
    })
}

/// Rule (1): whether the automation exists in the caller's workspace now.
pub fn accessible(db: &Connection, call: &Call<'_>) -> rusqlite::Result<bool> {
    db.prepare_cached("SELECT 1 FROM automations WHERE id = ?1 AND workspace_id = ?2")?
        .query_row(
            params![call.automation_id, call.principal.identity.workspace_id],
            |_| Ok(()),
        )
        .optional()
        .map(|found| found.is_some())
}

/// Rule (2): the saved (payload, response) under the call's key, scoped by (workspace, user,
/// tool, request id), or by the request id alone when not `scoped`.
pub fn saved_receipt(
    db: &Connection,
    call: &Call<'_>,
    scoped: bool,
) -> rusqlite::Result<Option<(String, String)>> {
    let identity = call.principal.identity;
    let read = |row: &rusqlite::Row<'_>| Ok((row.get(0)?, row.get(1)?));
    if scoped {
        db.prepare_cached(
            "SELECT payload, response FROM receipts \
             WHERE workspace_id = ?1 AND user_id = ?2 AND tool = ?3 AND request_id = ?4",
        )?
        .query_row(
            params![
                identity.workspace_id,
                identity.user_id,
                TOOL,
                call.request_id
            ],
            read,
        )
        .optional()
    } else {
        db.prepare_cached(
            "SELECT payload, response FROM receipts WHERE request_id = ?1 ORDER BY rowid LIMIT 1",
        )?
        .query_row([call.request_id], read)
        .optional()
    }
}

/// The answer for a saved receipt: the historical result marked replayed, or key reuse when
/// `payload_check` finds another payload under the key.
pub fn answer_saved(
    call: &Call<'_>,
    (payload, response): (String, String),
    payload_check: bool,
) -> Result<Reply<EditResult>, Stop> {
    if payload_check && payload != call.payload() {
        return Ok(Reply::KeyReuse);
    }
    let result: EditResult = serde_json::from_str(&response).map_err(|error| {
        Stop::Storage(rusqlite::Error::FromSqlConversionFailure(
            1,
            rusqlite::types::Type::Text,
            Box::new(error),
        ))
    })?;
    Ok(Reply::Replayed(result))
}

/// Rule (3): the update, conditioned on the expected version when `versioned`; `None` when no
/// row matched (a version conflict).
pub fn update(
    db: &Connection,
    call: &Call<'_>,
    versioned: bool,
) -> rusqlite::Result<Option<EditResult>> {
    let condition = UpdateCondition {
        version: versioned,
        ..UpdateCondition::CONTRACT
    };
    update_where(db, call, condition)
}

/// What the update of an automation is conditioned on, beyond its id.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UpdateCondition {
    /// The caller's expected version is the row's (rule 3).
    pub version: bool,
    /// The row is in the caller's workspace.
    pub workspace: bool,
}

impl UpdateCondition {
    /// Both, as the contract updates.
    pub const CONTRACT: UpdateCondition = UpdateCondition {
        version: true,
        workspace: true,
    };
}

/// The call's update, setting its interval and moving the version on, under `condition`:
/// the changed row's result, or `None` when no row matched.
pub fn update_where(
    db: &Connection,
    call: &Call<'_>,
    condition: UpdateCondition,
) -> rusqlite::Result<Option<EditResult>> {
    // A condition left out still names its parameter (`?3 = ?3`), so that every variant binds
    // the same four.
    let sql = match (condition.workspace, condition.version) {
        (true, true) => {
            "UPDATE automations SET interval_minutes = ?1, version = version + 1 \
             WHERE id = ?2 AND workspace_id = ?3 AND version = ?4 \
             RETURNING id, interval_minutes, version"
        }
        (true, false) => {
            "UPDATE automations SET interval_minutes = ?1, version = version + 1 \
             WHERE id = ?2 AND workspace_id = ?3 AND ?4 = ?4 \
             RETURNING id, interval_minutes, version"
        }
        (false, true) => {
            "UPDATE automations SET interval_minutes = ?1, version = version + 1 \
             WHERE id = ?2 AND ?3 = ?3 AND version = ?4 \
             RETURNING id, interval_minutes, version"
        }
        (false, false) => {
            "UPDATE automations SET interval_minutes = ?1, version = version + 1 \
             WHERE id = ?2 AND ?3 = ?3 AND ?4 = ?4 \
             RETURNING id, interval_minutes, version"
        }
    };
    db.prepare_cached(sql)?
        .query_row(
            params![
                call.interval_minutes,
                call.automation_id,
                call.principal.identity.workspace_id,
                call.expected_version
            ],
            |row| {
                Ok(EditResult {
                    id: row.get(0)?,
                    interval_minutes: row.get(1)?,
                    version: row.get(2)?,
                })
            },
        )
        .optional()
}

/// One row of the `receipts` table, as [`insert_receipt_row`] writes it (created now, by the
/// simulated clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiptRow<'a> {
    /// The workspace of its key.
    pub workspace_id: &'a str,
    /// The user of its key.
    pub user_id: &'a str,
    /// The request id of its key.
    pub request_id: &'a str,
    /// The payload the key is bound to: [`Call::payload`] for the contract's.
    pub payload: String,
    /// The response a replay answers: [`EditResult`]'s JSON (its `Display`), which
    /// [`answer_saved`] reads back.
    pub response: String,
}

impl<'a> ReceiptRow<'a> {
    /// The contract's receipt of `call` for `result`: under the caller's (workspace, user,
    /// tool, request id), binding the call's payload, replaying `result`. A variant changes a
    /// field: `ReceiptRow { payload: String::new(), ..ReceiptRow::of(&call, &result) }`.
    pub fn of(call: &Call<'a>, result: &EditResult) -> Self {
        let identity = call.principal.identity;
        ReceiptRow {
            workspace_id: identity.workspace_id,
            user_id: identity.user_id,
            request_id: call.request_id,
            payload: call.payload(),
            response: result.to_string(),
        }
    }
}

/// Rule (4): the receipt for `result` under the call's scoped key, created now.
pub fn insert_receipt(
    db: &Connection,
    call: &Call<'_>,
    result: &EditResult,
) -> rusqlite::Result<()> {
    insert_receipt_row(db, &ReceiptRow::of(call, result))
}

/// Inserts `row` into `receipts` for this tool, created now.
pub fn insert_receipt_row(db: &Connection, row: &ReceiptRow<'_>) -> rusqlite::Result<()> {
    db.prepare_cached("INSERT INTO receipts VALUES (?1, ?2, ?3, ?4, ?5, ?6, retrysim_now())")?
        .execute(params![
            row.workspace_id,
            row.user_id,
            TOOL,
            row.request_id,
            row.payload,
            row.response
        ])?;
    Ok(())
}

/// Ends the transaction without its writes and answers `reply`.
pub fn abandon(db: &Connection, reply: Reply<EditResult>) -> Result<Reply<EditResult>, Stop> {
    run(db, "ROLLBACK")?;
    Ok(reply)
}

impl IntervalHandler for Rules {
    fn set_interval(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        principal: &Principal,
        args: &ToolArgs,
    ) -> Result<Reply<EditResult>, Stop> {
        let call = match validate(principal, args) {
            Ok(call) => call,
            Err(refusal) => return Ok(refusal),
        };
        ctx.point("before-begin")?;
        let locked = self.lookup_in_write_transaction;
        if !locked {
            if !accessible(db, &call)? {
                return Ok(denied(UNAVAILABLE));
            }
            // The mistake: this lookup is a transaction of its own; a duplicate running at
            // the same time also finds no receipt before either writes.
            if let Some(saved) = saved_receipt(db, &call, self.scoped_key)? {
                return answer_saved(&call, saved, self.payload_check);
            }
            ctx.point("after-lookup")?;
        }
        // SQLite serializes writers: BEGIN IMMEDIATE takes the write lock before the lookup.
        run(db, "BEGIN IMMEDIATE")?;
        // (1) An old receipt does not grant current access.
        if locked && self.access_before_receipt && !accessible(db, &call)? {
            return abandon(db, denied(UNAVAILABLE));
        }
        ctx.point("after-access")?;
        // (2) The receipt comes before the version: a committed original has already moved it.
        if locked && self.receipts && self.receipt_before_version {
            if let Some(saved) = saved_receipt(db, &call, self.scoped_key)? {
                run(db, "COMMIT")?;
                return answer_saved(&call, saved, self.payload_check);
            }
        }
        if locked && !self.access_before_receipt && !accessible(db, &call)? {
            return abandon(db, denied(UNAVAILABLE));
        }
        if locked {
            ctx.point("after-lookup")?;
        }
        // (3) The version-conditioned update.
        let Some(result) = update(db, &call, self.versioned_update)? else {
            return abandon(db, refused(VERSION_CONFLICT));
        };
        ctx.point("after-update")?;
        if self.receipts && !self.receipt_before_version {
            if let Some(saved) = saved_receipt(db, &call, self.scoped_key)? {
                run(db, "ROLLBACK")?;
                return answer_saved(&call, saved, self.payload_check);
            }
        }
        // (4) The receipt, in the same transaction: row change and receipt appear together.
        if self.receipts {
            if !self.one_transaction {
                run(db, "COMMIT")?;
                ctx.point("between-commits")?;
                run(db, "BEGIN IMMEDIATE")?;
            }
            insert_receipt(db, &call, &result)?;
        }
        ctx.point("before-commit")?;
        run(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(result))
    }

    fn keeps_receipts(&self) -> bool {
        self.receipts
    }

    fn retention_ms(&self) -> Option<u64> {
        self.retention_ms.filter(|_| self.receipts)
    }

    /// Every rule answers a verdict; only a storage error (a storage fault, or a locked
    /// database with overlapping invocations) makes the answer unavailable.
    fn answers_only_verdicts(&self) -> bool {
        true
    }
}

macro_rules! handler {
    ($(#[$doc:meta])* $name:ident, $rules:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;

        impl IntervalHandler for $name {
            fn set_interval(
                &self,
                ctx: &mut Ctx<'_>,
                db: &Connection,
                principal: &Principal,
                args: &ToolArgs,
            ) -> Result<Reply<EditResult>, Stop> {
                $rules.set_interval(ctx, db, principal, args)
            }

            fn keeps_receipts(&self) -> bool {
                $rules.keeps_receipts()
            }

            fn retention_ms(&self) -> Option<u64> {
                $rules.retention_ms()
            }

            fn answers_only_verdicts(&self) -> bool {
                $rules.answers_only_verdicts()
            }
        }
    };
}

handler!(
    /// `receipt` (correct): access check, then receipt lookup, then the version condition, all
    /// in one `BEGIN IMMEDIATE` transaction, and the receipt committed with the row change.
    Receipt,
    Rules::RECEIPT
);

handler!(
    /// `version-only` (faulty): the version-conditioned update and no receipt. A retry whose
    /// reply was lost is told "version conflict" for its own committed edit
    /// (`outcome-agreement`).
    VersionOnly,
    Rules {
        receipts: false,
        ..Rules::RECEIPT
    }
);

handler!(
    /// `version-before-receipt` (faulty): breaks "the receipt comes before the version"; it
    /// checks the version first, so it refuses its own retry (`outcome-agreement`).
    VersionBeforeReceipt,
    Rules {
        receipt_before_version: false,
        ..Rules::RECEIPT
    }
);

handler!(
    /// `replay-before-access` (faulty): breaks "current access comes before the receipt"; a
    /// revoked principal or a moved or deleted resource still gets a replay
    /// (`access-before-replay`).
    ReplayBeforeAccess,
    Rules {
        access_before_receipt: false,
        ..Rules::RECEIPT
    }
);

handler!(
    /// `split-commit` (faulty): breaks "row change and receipt commit together"; it commits
    /// them in two transactions, and a crash between them loses the receipt
    /// (`effect-record-atomicity`).
    SplitCommit,
    Rules {
        one_transaction: false,
        ..Rules::RECEIPT
    }
);

handler!(
    /// `unscoped-key` (faulty): breaks "the key is scoped to workspace, user and tool"; it
    /// looks receipts up by request id alone, so one principal's id reaches another's result
    /// (`scope-isolation`).
    UnscopedKey,
    Rules {
        scoped_key: false,
        ..Rules::RECEIPT
    }
);

handler!(
    /// `no-payload-check` (faulty): breaks "the key is bound to its payload"; it replays
    /// whatever is saved under the key, whatever the arguments (`no-silent-key-reuse`).
    NoPayloadCheck,
    Rules {
        payload_check: false,
        ..Rules::RECEIPT
    }
);

handler!(
    /// `last-write-wins` (faulty): breaks "new edits keep the version condition"; its update
    /// ignores the expected version, so a stale edit under a new key overwrites a newer one
    /// (`no-lost-update`).
    LastWriteWins,
    Rules {
        versioned_update: false,
        ..Rules::RECEIPT
    }
);

handler!(
    /// `short-retention` (faulty): `receipt` whose receipts are purged after
    /// [`SHORT_RETENTION_MS`], before a client's retries are over. A retry that arrives after
    /// the purge finds no receipt; the version has moved on, so it is told "version conflict"
    /// for its own edit (`outcome-agreement`).
    ShortRetention,
    Rules {
        retention_ms: Some(SHORT_RETENTION_MS),
        ..Rules::RECEIPT
    }
);

handler!(
    /// `deferred-lookup` (faulty): breaks "the lookup is inside the write transaction"; it
    /// checks access and looks up the receipt first, then writes in a transaction of its own.
    /// Alone it behaves like `receipt`; two copies of one request in the server at once both
    /// find no receipt, and the second is told "version conflict" for an edit that applied
    /// (`outcome-agreement`).
    DeferredLookup,
    Rules {
        lookup_in_write_transaction: false,
        ..Rules::RECEIPT
    }
);
