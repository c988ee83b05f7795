//! ns-3 topology text (`TOPOLOGY_FILE`): any text parsed into a topology with routing. Must
//! return Ok or Err, never panic or allocate from an unchecked count.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsim_topo::ns3;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = ns3::parse_ns3(&text, "topology.txt", 1).map_err(|e| e.to_string());
});
