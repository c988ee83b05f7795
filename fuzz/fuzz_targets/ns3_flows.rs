//! ns-3 flow file (`FLOW_FILE`) and `fct.txt`: any text parsed as both. Must return Ok or Err,
//! never panic or allocate from an unchecked count.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsim_net::packet::ns3;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = ns3::parse_flows(&text, "flow.txt").map_err(|e| e.to_string());
    let _ = ns3::parse_fct(&text, "fct.txt").map_err(|e| e.to_string());
});
