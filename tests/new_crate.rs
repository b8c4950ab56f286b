//! tests/deposits.rs in your crate: a deposit handler on SQLite, checked from `cargo test`.
use retrysim::sqlite::rusqlite::{params, Connection, OptionalExtension};
use retrysim::sqlite::{execute_cached, Stop};
use retrysim::{
    AdminSql, Bounds, Check, Ctx, Decider, Intent, Keyed, OnSql, Reply, SqlHandler, Workload,
};

/// `Check::system` clones the system for each thread: derive `Clone`.
#[derive(Clone)]
struct Deposits;

impl SqlHandler for Deposits {
    type Request = Keyed<i64>; // "deposit this amount", under a request id
    type Value = i64; // the new balance
    type Memory = (); // nothing kept in process memory

    const SCHEMA: &'static str = "
        CREATE TABLE account (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL);
        INSERT INTO account VALUES (1, 0);
        CREATE TABLE deposits (request_id TEXT PRIMARY KEY, amount INTEGER NOT NULL,
                               balance INTEGER NOT NULL);";
    // The tables whose changes are the effects the invariants count.
    const EFFECT_TABLES: &'static [&'static str] = &["account"];

    /// One deposit per client, for as many clients as the bounds allow (honour
    /// `clients_max`: a reproduction may ask for fewer).
    fn workload(&self, _: &mut Decider<'_>, bounds: &Bounds) -> Workload<Keyed<i64>, AdminSql> {
        let clients = [("d1", 5), ("d2", 7)]
            .into_iter()
            .take(bounds.clients_max as usize);
        let intents = clients.map(|(id, amount)| vec![Intent::new(Keyed::new(id, amount))]);
        Workload::of_clients(intents.collect())
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        db: &Connection,
        _: &mut (),
        deposit: &Keyed<i64>,
    ) -> Result<Reply<i64>, Stop> {
        // Crash points: name them as you like; the schedule may crash the server at each.
        ctx.point("before-begin")?;
        execute_cached(db, "BEGIN IMMEDIATE")?;
        let saved = db
            .query_row(
                "SELECT amount, balance FROM deposits WHERE request_id = ?1",
                [&deposit.id],
                |row| Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?)),
            )
            .optional()?;
        if let Some((amount, balance)) = saved {
            execute_cached(db, "COMMIT")?;
            return Ok(if amount == deposit.args {
                Reply::Replayed(balance)
            } else {
                Reply::KeyReuse
            });
        }
        let balance: i64 = db.query_row(
            "UPDATE account SET balance = balance + ?1 WHERE id = 1 RETURNING balance",
            [deposit.args],
            |row| row.get(0),
        )?;
        db.execute(
            "INSERT INTO deposits VALUES (?1, ?2, ?3)",
            params![deposit.id, deposit.args, balance],
        )?;
        ctx.point("before-commit")?;
        execute_cached(db, "COMMIT")?;
        ctx.point("after-commit")?;
        Ok(Reply::Applied(balance))
    }
}

#[test]
fn deposits_apply_once() {
    // Two requests in flight at once are explored by default.
    Check::system("deposits", OnSql(Deposits))
        .seeds(0..2_000)
        .run();
}
