//! Link classes as a user writes them, their defaults, and the spine-count choice: the pieces
//! every topology family's spec shares ([`crate::spec`] and the family modules import them from
//! here, so no family imports the spec that names it).

use llmsim_core::{Bandwidth, FieldError, SimTime};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::TopoError;
use crate::generators::SpineCount;
use crate::graph::LinkParams;

/// Default host NIC link: 400Gbps, 500ns.
pub const DEFAULT_NIC: LinkParams = LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(500));
/// Default switch-to-switch link: 400Gbps, 600ns.
pub const DEFAULT_FABRIC: LinkParams = LinkParams::new(Bandwidth::from_gbps(400), SimTime::from_ns(600));

/// A link class as a user writes it: `{ bandwidth: "400Gbps", latency: "500ns" }`; a field left
/// out takes the class default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LinkSpec {
    /// Line rate, e.g. `400Gbps`. Default: the class default.
    pub bandwidth: Option<Bandwidth>,
    /// One-way latency of the link (propagation and switch pipeline), e.g. `500ns`. Default:
    /// the class default.
    pub latency: Option<SimTime>,
}

impl LinkSpec {
    /// This spec with each field left out taken from `default`.
    pub fn resolve(&self, default: LinkParams) -> LinkParams {
        LinkParams::new(self.bandwidth.unwrap_or(default.bandwidth), self.latency.unwrap_or(default.latency))
    }
}

pub(crate) fn spine_count(spines: Option<u32>, oversubscription: Option<f64>) -> Result<SpineCount, TopoError> {
    match (spines, oversubscription) {
        (Some(_), Some(_)) => Err(FieldError::new("topology.spines", "give either spines or oversubscription, not both").into()),
        (Some(n), None) => Ok(SpineCount::Count(n)),
        (None, Some(r)) => Ok(SpineCount::Oversubscription(r)),
        (None, None) => Ok(SpineCount::Oversubscription(1.0)),
    }
}
