//! The reservation domain's requests, results and fixtures.

use retrysim_sim::Request;
use std::borrow::Cow;
use std::fmt;

/// A reservation request: the tenant (trusted scope), the request id and the slot.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReservationRequest {
    /// The tenant, from access control; never from the arguments.
    pub tenant: &'static str,
    /// The request id this submission carries.
    pub request_id: Cow<'static, str>,
    /// The request id persisted before the first submission (differs from `request_id` only
    /// when a faulty client made a new one).
    pub first_id: Cow<'static, str>,
    /// The slot to reserve.
    pub slot: &'static str,
}

impl ReservationRequest {
    /// A request whose id is persisted before its first submission.
    pub fn new(tenant: &'static str, request_id: &'static str, slot: &'static str) -> Self {
        ReservationRequest {
            tenant,
            request_id: Cow::Borrowed(request_id),
            first_id: Cow::Borrowed(request_id),
            slot,
        }
    }
}

impl Request for ReservationRequest {
    /// `tenant/request-id`.
    type Key = String;

    fn key(&self) -> String {
        format!("{}/{}", self.tenant, self.request_id)
    }

    fn request_id(&self) -> &str {
        &self.request_id
    }

    fn with_fresh_id(&self, generation: u32) -> Self {
        ReservationRequest {
            request_id: Cow::Owned(format!("{}-r{generation}", self.first_id)),
            ..self.clone()
        }
    }

    fn describe(&self) -> String {
        format!("{} {} {}", self.tenant, self.request_id, self.slot)
    }
}

/// A reservation's reference, e.g. `rsv-1`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Reference(pub String);

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A fixture state applied before a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fixture {
    /// A pending action record: the action is in progress elsewhere.
    Pending {
        /// Its tenant.
        tenant: &'static str,
        /// Its request id.
        request_id: &'static str,
        /// Its slot.
        slot: &'static str,
    },
}

impl fmt::Display for Fixture {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fixture::Pending {
                tenant,
                request_id,
                slot,
            } => write!(f, "pending record {tenant} {request_id} {slot}"),
        }
    }
}
