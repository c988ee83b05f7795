//! Chakra execution-trace messages, written from the field numbers of MLCommons Chakra's
//! `schema/protobuf/et_def.proto` (package `ChakraProtoMsg`, as shipped in the `mlc-chakra` 1.0.0
//! wheel, Apache-2.0). Only the fields llmsim reads or writes are declared; protobuf skips the
//! others (the list-valued attributes among them) as unknown fields.

/// `message AttributeProto { string name = 1; string doc_string = 2; oneof value { ... } }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttributeProto {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub doc_string: String,
    #[prost(oneof = "AttrValue", tags = "3, 5, 7, 9, 10, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29")]
    pub value: Option<AttrValue>,
}

/// The scalar members of `AttributeProto.value` (and `int64_list`, which llmsim writes).
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum AttrValue {
    #[prost(double, tag = "3")]
    DoubleVal(f64),
    #[prost(float, tag = "5")]
    FloatVal(f32),
    #[prost(int32, tag = "7")]
    Int32Val(i32),
    #[prost(int64, tag = "9")]
    Int64Val(i64),
    #[prost(message, tag = "10")]
    Int64List(Int64List),
    #[prost(uint32, tag = "11")]
    Uint32Val(u32),
    #[prost(uint64, tag = "13")]
    Uint64Val(u64),
    #[prost(sint32, tag = "15")]
    Sint32Val(i32),
    #[prost(sint64, tag = "17")]
    Sint64Val(i64),
    #[prost(fixed32, tag = "19")]
    Fixed32Val(u32),
    #[prost(fixed64, tag = "21")]
    Fixed64Val(u64),
    #[prost(sfixed32, tag = "23")]
    Sfixed32Val(i32),
    #[prost(sfixed64, tag = "25")]
    Sfixed64Val(i64),
    #[prost(bool, tag = "27")]
    BoolVal(bool),
    #[prost(string, tag = "29")]
    StringVal(String),
}

/// `message Int64List { repeated int64 values = 1; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Int64List {
    #[prost(int64, repeated, tag = "1")]
    pub values: Vec<i64>,
}

/// `message GlobalMetadata { string version = 1; repeated AttributeProto attr = 2; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct GlobalMetadata {
    #[prost(string, tag = "1")]
    pub version: String,
    #[prost(message, repeated, tag = "2")]
    pub attr: Vec<AttributeProto>,
}

/// `enum NodeType`.
pub mod node_type {
    pub const INVALID: i32 = 0;
    pub const METADATA: i32 = 1;
    pub const MEM_LOAD: i32 = 2;
    pub const MEM_STORE: i32 = 3;
    pub const COMP: i32 = 4;
    pub const COMM_SEND: i32 = 5;
    pub const COMM_RECV: i32 = 6;
    pub const COMM_COLL: i32 = 7;
}

/// `enum CollectiveCommType`.
pub mod comm_type {
    pub const ALL_REDUCE: i64 = 0;
    pub const REDUCE: i64 = 1;
    pub const ALL_GATHER: i64 = 2;
    pub const GATHER: i64 = 3;
    pub const SCATTER: i64 = 4;
    pub const BROADCAST: i64 = 5;
    pub const ALL_TO_ALL: i64 = 6;
    pub const REDUCE_SCATTER: i64 = 7;
    pub const REDUCE_SCATTER_BLOCK: i64 = 8;
    pub const BARRIER: i64 = 9;
}

/// `message IOInfo { string values = 1; string shapes = 2; string types = 3; }`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IoInfo {
    #[prost(string, tag = "1")]
    pub values: String,
    #[prost(string, tag = "2")]
    pub shapes: String,
    #[prost(string, tag = "3")]
    pub types: String,
}

/// `message Node`: id 1, name 2, type 3, ctrl_deps 4, data_deps 5, start_time_micros 6,
/// duration_micros 7, inputs 8, outputs 9, attr 10.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Node {
    #[prost(uint64, tag = "1")]
    pub id: u64,
    #[prost(string, tag = "2")]
    pub name: String,
    #[prost(int32, tag = "3")]
    pub r#type: i32,
    #[prost(uint64, repeated, tag = "4")]
    pub ctrl_deps: Vec<u64>,
    #[prost(uint64, repeated, tag = "5")]
    pub data_deps: Vec<u64>,
    #[prost(uint64, tag = "6")]
    pub start_time_micros: u64,
    #[prost(uint64, tag = "7")]
    pub duration_micros: u64,
    #[prost(message, optional, tag = "8")]
    pub inputs: Option<IoInfo>,
    #[prost(message, optional, tag = "9")]
    pub outputs: Option<IoInfo>,
    #[prost(message, repeated, tag = "10")]
    pub attr: Vec<AttributeProto>,
}

impl AttributeProto {
    pub fn int(name: &str, v: i64) -> Self {
        AttributeProto {
            name: name.into(),
            doc_string: String::new(),
            value: Some(AttrValue::Int64Val(v)),
        }
    }
    pub fn uint(name: &str, v: u64) -> Self {
        AttributeProto {
            name: name.into(),
            doc_string: String::new(),
            value: Some(AttrValue::Uint64Val(v)),
        }
    }
    pub fn boolean(name: &str, v: bool) -> Self {
        AttributeProto {
            name: name.into(),
            doc_string: String::new(),
            value: Some(AttrValue::BoolVal(v)),
        }
    }
    pub fn string(name: &str, v: &str) -> Self {
        AttributeProto {
            name: name.into(),
            doc_string: String::new(),
            value: Some(AttrValue::StringVal(v.into())),
        }
    }

    /// An integer value of any integer encoding; `None` for other kinds.
    pub fn as_i128(&self) -> Option<i128> {
        Some(match self.value.as_ref()? {
            AttrValue::Int32Val(v) | AttrValue::Sint32Val(v) | AttrValue::Sfixed32Val(v) => *v as i128,
            AttrValue::Int64Val(v) | AttrValue::Sint64Val(v) | AttrValue::Sfixed64Val(v) => *v as i128,
            AttrValue::Uint32Val(v) | AttrValue::Fixed32Val(v) => *v as i128,
            AttrValue::Uint64Val(v) | AttrValue::Fixed64Val(v) => *v as i128,
            AttrValue::BoolVal(b) => *b as i128,
            // Some converters write sizes as doubles.
            AttrValue::DoubleVal(d) if d.fract() == 0.0 && d.is_finite() => *d as i128,
            _ => return None,
        })
    }
}
