//! The small text formats: Chakra communicator-group JSON (`--comm-groups`), unit strings
//! (time, bytes, bandwidth) and NCCL names (collective, algorithm, protocol). The first byte
//! picks the parser. Must return Ok or Err, never panic or wrap.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsim_ccl::tuning::{Algo, Proto};
use llmsim_core::{Bandwidth, Bytes, SimTime};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else { return };
    let text = String::from_utf8_lossy(rest);
    match which % 4 {
        0 => {
            let _ = llmsim_workload::chakra::parse_comm_groups(&text, "groups.json").map_err(|e| e.to_string());
        }
        1 => {
            let _ = text.parse::<SimTime>().map_err(|e| e.to_string());
            let _ = text.parse::<Bytes>().map_err(|e| e.to_string());
            let _ = text.parse::<Bandwidth>().map_err(|e| e.to_string());
        }
        2 => {
            let _ = serde_json::from_str::<SimTime>(&text).map_err(|e| e.to_string());
            let _ = serde_json::from_str::<Bytes>(&text).map_err(|e| e.to_string());
            let _ = serde_json::from_str::<Bandwidth>(&text).map_err(|e| e.to_string());
        }
        _ => {
            let _ = text.parse::<llmsim_core::CollectiveOp>().map_err(|e| e.to_string());
            let _ = text.parse::<Algo>().map_err(|e| e.to_string());
            let _ = text.parse::<Proto>().map_err(|e| e.to_string());
        }
    }
});
