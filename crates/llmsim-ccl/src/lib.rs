//! NCCL-faithful collectives: the cost model that picks algorithm/protocol/channels, and the
//! expansion of a collective into a DAG of point-to-point transfers.

pub mod tuning;
