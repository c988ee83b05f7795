//! JSON Schema pieces for types of crates that do not derive `JsonSchema` themselves.

use std::borrow::Cow;

use llmsim_compute::DType;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

/// The schema of a [`DType`] as a scenario writes it: its serde names, taken from
/// [`DType::SCENARIO`] so a new dtype appears here without an edit.
pub struct DTypeSchema;

impl JsonSchema for DTypeSchema {
    fn schema_name() -> Cow<'static, str> {
        "DType".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        let names: Vec<serde_json::Value> = DType::SCENARIO
            .iter()
            .map(|d| serde_json::to_value(d).unwrap_or_default())
            .collect();
        json_schema!({
            "type": "string",
            "enum": names,
            "description": "Numeric format: fp32, tf32, bf16, fp16, fp8 or fp4 (NVFP4, also `nvfp4`).",
        })
    }
}
