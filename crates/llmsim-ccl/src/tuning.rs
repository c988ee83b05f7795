//! NCCL tuning model (filled in by the tuning work).
