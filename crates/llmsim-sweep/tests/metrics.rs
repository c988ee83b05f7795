//! One definition of the metrics (issue 31): a sweep row's metrics are the report's own fields,
//! and reading them back from the report's JSON text, as Python's `Report.metrics` does, gives
//! the same bits.

use std::path::Path;

use llmsim_sim::{RunOptions, Scenario};
use llmsim_sweep::{METRICS, metrics_of, metrics_of_json};

const SCENARIO: &str = "model: { preset: gpt3-13b, num_hidden_layers: 4 }
training: { global_batch_size: 16 }
parallel: { tp: 2, pp: 2 }
cluster: { gpus: 16 }
output: { trace: false, flows: false }
";

fn bits(v: &[Option<f64>]) -> Vec<Option<u64>> {
    v.iter().map(|x| x.map(f64::to_bits)).collect()
}

#[test]
fn metrics_are_the_report_fields_and_survive_its_json_text() {
    let sc = Scenario::from_yaml(SCENARIO, &[], Path::new(".")).unwrap();
    let r = llmsim_sim::simulate(&sc, &RunOptions::default(), &mut |_, _| {}).unwrap().report;
    let m = &r.mean;
    // The definition sweep rows used before the metrics were read from the report's JSON.
    let fields = [
        Some(r.iteration_time_s),
        r.tokens_per_s,
        r.tokens_per_s_per_gpu,
        r.mfu,
        r.hfu,
        r.model_tflops_per_gpu,
        r.memory.as_ref().map(|mem| mem.footprint.total as f64 / f64::from(1u32 << 30)),
        r.memory.as_ref().map(|mem| mem.fraction),
        Some(m.compute_s),
        Some(m.exposed_tp_s),
        Some(m.exposed_cp_s),
        Some(m.exposed_ep_s),
        Some(m.exposed_pp_s),
        Some(m.exposed_dp_s),
        Some(m.bubble_s),
        Some(m.idle_s),
        Some(m.exposed_offload_s),
        Some(m.exposed_host_s),
        Some(f64::from(r.gpus)),
        Some(f64::from(r.microbatches)),
        Some(r.sim_wall_s),
    ];
    // A model run knows every metric.
    assert!(fields.iter().all(Option::is_some), "{fields:?}");
    let got = metrics_of(&r);
    assert_eq!(got.len(), METRICS.len());
    assert_eq!(bits(&got), bits(&fields), "{METRICS:?}");
    let text = serde_json::to_string(&r).unwrap();
    let back = metrics_of_json(&serde_json::from_str(&text).unwrap());
    assert_eq!(bits(&back), bits(&got));
    // A stored row's report has no wall time: that metric, alone, is absent.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("sim_wall_s");
    let row = metrics_of_json(&v);
    let wall = METRICS.iter().position(|n| *n == "sim_wall_s").unwrap();
    assert!(row[wall].is_none() && row.iter().enumerate().all(|(i, x)| i == wall || x.is_some()));
}
