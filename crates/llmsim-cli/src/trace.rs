//! Perfetto / Chrome trace-event JSON. `ph:"X"` events must nest per track, so events of one
//! process are packed greedily into lanes (tids) in which they never overlap.

use serde::Serialize;
use serde_json::{Value, json};

/// One complete event: `[start_us, start_us + dur_us)` on process `pid`.
#[derive(Clone, Debug)]
pub struct TraceEvent {
    pub pid: u32,
    pub name: String,
    pub cat: &'static str,
    pub start_us: f64,
    pub dur_us: f64,
    pub args: Value,
}

#[derive(Serialize)]
struct Trace {
    #[serde(rename = "traceEvents")]
    trace_events: Vec<Value>,
    #[serde(rename = "displayTimeUnit")]
    display_time_unit: &'static str,
}

/// Builds the trace JSON. `process_name(pid)` names each process track.
pub fn to_json(mut spans: Vec<TraceEvent>, process_name: impl Fn(u32) -> String) -> Value {
    spans.sort_by(|a, b| {
        (a.pid, a.start_us, a.name.as_str())
            .partial_cmp(&(b.pid, b.start_us, b.name.as_str()))
            .expect("finite times")
    });
    let mut events = Vec::with_capacity(spans.len() + 64);
    let mut i = 0;
    while i < spans.len() {
        let pid = spans[i].pid;
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid, "args": {"name": process_name(pid)}}));
        // lane_end[k]: when lane k becomes free.
        let mut lane_end: Vec<f64> = Vec::new();
        while i < spans.len() && spans[i].pid == pid {
            let s = &spans[i];
            let lane = match lane_end.iter().position(|e| *e <= s.start_us) {
                Some(l) => l,
                None => {
                    lane_end.push(0.0);
                    events.push(json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": lane_end.len() - 1,
                        "args": {"name": format!("lane {}", lane_end.len() - 1)}}));
                    lane_end.len() - 1
                }
            };
            lane_end[lane] = s.start_us + s.dur_us;
            events.push(json!({"ph": "X", "name": s.name, "cat": s.cat, "pid": pid, "tid": lane,
                "ts": s.start_us, "dur": s.dur_us, "args": s.args}));
            i += 1;
        }
    }
    serde_json::to_value(Trace {
        trace_events: events,
        display_time_unit: "ns",
    })
    .expect("trace serializes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_spans_go_to_separate_lanes() {
        let sp = |s: f64, d: f64| TraceEvent {
            pid: 0,
            name: "t".into(),
            cat: "x",
            start_us: s,
            dur_us: d,
            args: Value::Null,
        };
        let v = to_json(vec![sp(0.0, 10.0), sp(5.0, 10.0), sp(10.0, 1.0)], |p| format!("rank {p}"));
        let tids: Vec<u64> = v["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| e["tid"].as_u64().unwrap())
            .collect();
        assert_eq!(tids, vec![0, 1, 0]);
    }
}
