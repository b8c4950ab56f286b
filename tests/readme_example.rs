//! The README's `cargo test` example, run by `cargo test`: the two tests below are the
//! README's code as it stands there (a test in `tests/integration/readme.rs` holds them
//! equal), and `MySystem`, after them, is the system they check. Copy this file into your
//! crate's `tests/` folder to start from it.

use retrysim::{check, Check};

#[test]
fn keyed_sqlite_counts_once() {
    check("counter", "keyed-sqlite").seeds(0..10_000).run();
}

#[test]
fn my_handler_is_idempotent() {
    // MySystem implements retrysim::System: your store, workload and handler.
    Check::system("deposits", MySystem::default())
        .seeds(0..10_000)
        .regressions("tests/retrysim-regressions.txt")
        .run();
}

use retrysim::{
    Bounds, ChoiceKind, Crash, Ctx, Decider, Intent, IntentId, IntentTag, Ledger, NoEvent, Reply,
    Request, Situation, StoreKind, System, Workload,
};
use std::collections::BTreeMap;

/// A deposit into one account under a request id chosen before the first send.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Deposit {
    /// The request id.
    pub id: &'static str,
    /// The amount.
    pub cents: i64,
}

impl Request for Deposit {
    type Key = &'static str;

    fn key(&self) -> &'static str {
        self.id
    }

    fn request_id(&self) -> &str {
        self.id
    }

    fn with_fresh_id(&self, _generation: u32) -> Self {
        self.clone()
    }

    fn describe(&self) -> String {
        format!("{} +{}c", self.id, self.cents)
    }
}

/// The durable store: the balance, the saved reply of every request id, and the harness's
/// ledger, which records each deposit under the intent the engine says is being served.
pub struct Account {
    balance: i64,
    receipts: BTreeMap<&'static str, (i64, i64)>,
    ledger: Ledger,
}

/// Deposits that apply once per request id: the deposit and its receipt change together.
#[derive(Clone, Copy, Debug, Default)]
pub struct MySystem {
    /// The balance every run starts from, in cents.
    pub opening_balance: i64,
}

impl StoreKind for MySystem {
    type Request = Deposit;
    type Value = i64;
    type Store = Account;
    type Memory = ();
    type Event = NoEvent;
    type Observation = ();

    fn open(&self, tag: &IntentTag) -> Account {
        Account {
            balance: self.opening_balance,
            receipts: BTreeMap::new(),
            ledger: Ledger::new(tag),
        }
    }

    fn reset(&self, account: &mut Account) {
        account.balance = self.opening_balance;
        account.receipts.clear();
        account.ledger.clear();
    }

    // The account lives in memory that survives a crash: nothing to reopen.
    fn restart(&self, _account: &mut Account) {}

    fn apply_event(&self, _account: &mut Account, event: &NoEvent) {
        match *event {}
    }

    fn observe(&self, _account: &Account, _deposit: &Deposit) {}

    fn effects(&self, account: &Account) -> Vec<IntentId> {
        account.ledger.effects().to_vec()
    }

    fn describe_store(&self, account: &Account) -> String {
        format!(
            "balance={} receipts={:?}",
            account.balance, account.receipts
        )
    }
}

impl System for MySystem {
    // Two clients: one deposits d-1 of 100 or 200 cents, the other may reuse d-1 or send d-2.
    fn workload(&self, decider: &mut Decider<'_>, bounds: &Bounds) -> Workload<Deposit, NoEvent> {
        let cents = 100 * (1 + i64::from(decider.choose(ChoiceKind::Workload, 2)));
        let mut clients = vec![vec![Intent::new(Deposit { id: "d-1", cents })]];
        let second = if bounds.clients_max >= 2 { 3 } else { 1 };
        match decider.choose(ChoiceKind::Workload, second) {
            1 => clients.push(vec![Intent::new(Deposit {
                id: "d-1",
                cents: 300,
            })]),
            2 => clients.push(vec![Intent::new(Deposit { id: "d-2", cents })]),
            _ => {}
        }
        Workload {
            clients,
            events: Vec::new(),
            setup: Vec::new(),
        }
    }

    fn handle(
        &self,
        ctx: &mut Ctx<'_>,
        account: &mut Account,
        _memory: &mut (),
        deposit: &Deposit,
    ) -> Result<Reply<i64>, Crash> {
        ctx.point("after-receive")?;
        match account.receipts.get(deposit.id) {
            Some(&(cents, balance)) if cents == deposit.cents => Ok(Reply::Replayed(balance)),
            Some(_) => Ok(Reply::KeyReuse),
            None => {
                account.balance += deposit.cents;
                account.ledger.record();
                account
                    .receipts
                    .insert(deposit.id, (deposit.cents, account.balance));
                ctx.point("after-commit")?;
                Ok(Reply::Applied(account.balance))
            }
        }
    }

    // The workload reuses d-1 with another amount: checks count the runs that exercise it,
    // and report no-silent-key-reuse as untested over a bound that never does.
    fn situations(&self) -> &'static [Situation] {
        &[Situation::KEY_REUSED]
    }
}
