/**
 * The messages of W&B's transaction log that an offline run written here holds: a subset of
 * `wandb_internal.Record` as defined in the public wandb repository (`wandb/proto/wandb_internal.proto`),
 * with its field numbers and types. Fields we never write are left out; a reader skips unknown fields.
 */
import protobuf from "protobufjs";

/** Our schema file: the messages we use, field numbers and types as in `wandb_internal.proto`. */
export const WANDB_RECORD_PROTO = `
syntax = "proto3";
package wandb_internal;

message Timestamp {
  int64 seconds = 1;
  int32 nanos = 2;
}

message Record {
  int64 num = 1;
  oneof record_type {
    HistoryRecord history = 2;
    SummaryRecord summary = 3;
    ConfigRecord config = 5;
    FilesRecord files = 6;
    ArtifactRecord artifact = 8;
    RunRecord run = 17;
    RunExitRecord exit = 18;
    FinalRecord final = 20;
    HeaderRecord header = 21;
  }
  Control control = 16;
  string uuid = 19;
}

message Control {
  bool req_resp = 1;
  bool local = 2;
}

message VersionInfo {
  string producer = 1;
  string min_consumer = 2;
}

message HeaderRecord {
  VersionInfo version_info = 1;
}

message FinalRecord {}

message SettingsItem {
  string key = 1;
  string value_json = 16;
}

message SettingsRecord {
  repeated SettingsItem item = 1;
}

message RunRecord {
  string run_id = 1;
  string entity = 2;
  string project = 3;
  ConfigRecord config = 4;
  SummaryRecord summary = 5;
  string run_group = 6;
  string job_type = 7;
  string display_name = 8;
  string notes = 9;
  repeated string tags = 10;
  SettingsRecord settings = 11;
  string host = 13;
  int64 starting_step = 14;
  Timestamp start_time = 17;
  bool resumed = 18;
}

message RunExitRecord {
  int32 exit_code = 1;
  int32 runtime = 2;
}

message HistoryStep {
  int64 num = 1;
}

message HistoryItem {
  string key = 1;
  repeated string nested_key = 2;
  string value_json = 16;
}

message HistoryRecord {
  repeated HistoryItem item = 1;
  HistoryStep step = 2;
}

message ConfigItem {
  string key = 1;
  repeated string nested_key = 2;
  string value_json = 16;
}

message ConfigRecord {
  repeated ConfigItem update = 1;
  repeated ConfigItem remove = 2;
}

message SummaryItem {
  string key = 1;
  repeated string nested_key = 2;
  string value_json = 16;
}

message SummaryRecord {
  repeated SummaryItem update = 1;
  repeated SummaryItem remove = 2;
}

message FilesItem {
  enum PolicyType {
    NOW = 0;
    END = 1;
    LIVE = 2;
  }
  enum FileType {
    OTHER = 0;
    WANDB = 1;
    MEDIA = 2;
    ARTIFACT = 3;
  }
  string path = 1;
  PolicyType policy = 2;
  FileType type = 3;
}

message FilesRecord {
  repeated FilesItem files = 1;
}

message StoragePolicyConfigItem {
  string key = 1;
  string value_json = 2;
}

message ExtraItem {
  string key = 1;
  string value_json = 2;
}

message ArtifactManifestEntry {
  string path = 1;
  string digest = 2;
  string ref = 3;
  int64 size = 4;
  string mimetype = 5;
  string local_path = 6;
  string birth_artifact_id = 7;
  bool skip_cache = 8;
  repeated ExtraItem extra = 16;
}

message ArtifactManifest {
  int32 version = 1;
  string storage_policy = 2;
  repeated StoragePolicyConfigItem storage_policy_config = 3;
  repeated ArtifactManifestEntry contents = 4;
}

message ArtifactRecord {
  string run_id = 1;
  string project = 2;
  string entity = 3;
  string type = 4;
  string name = 5;
  string digest = 6;
  string description = 7;
  string metadata = 8;
  bool user_created = 9;
  bool use_after_commit = 10;
  repeated string aliases = 11;
  ArtifactManifest manifest = 12;
  bool finalize = 14;
  string client_id = 15;
  string sequence_client_id = 16;
  repeated string tags = 19;
}
`;

/** Key and JSON value, as history, summary, config and settings items hold them. */
export interface ItemMessage {
  key?: string;
  nested_key?: string[];
  value_json?: string;
}

export interface RunMessage {
  run_id?: string;
  entity?: string;
  project?: string;
  run_group?: string;
  job_type?: string;
  display_name?: string;
  host?: string;
  settings?: { item?: ItemMessage[] };
  start_time?: { seconds?: number; nanos?: number };
  resumed?: boolean;
}

export interface ManifestEntryMessage {
  path?: string;
  digest?: string;
  size?: number;
  local_path?: string;
  skip_cache?: boolean;
}

export interface ArtifactMessage {
  run_id?: string;
  project?: string;
  entity?: string;
  type?: string;
  name?: string;
  digest?: string;
  user_created?: boolean;
  use_after_commit?: boolean;
  aliases?: string[];
  manifest?: {
    version?: number;
    storage_policy?: string;
    storage_policy_config?: { key?: string; value_json?: string }[];
    contents?: ManifestEntryMessage[];
  };
  finalize?: boolean;
  client_id?: string;
  sequence_client_id?: string;
}

/** One `wandb_internal.Record`, with the fields we use (as plain objects, snake_case). */
export interface RecordMessage {
  num?: number;
  header?: { version_info?: { producer?: string; min_consumer?: string } };
  run?: RunMessage;
  config?: { update?: ItemMessage[]; remove?: ItemMessage[] };
  history?: { item?: ItemMessage[]; step?: { num?: number } };
  summary?: { update?: ItemMessage[]; remove?: ItemMessage[] };
  files?: { files?: { path?: string; policy?: number; type?: number }[] };
  artifact?: ArtifactMessage;
  exit?: { exit_code?: number; runtime?: number };
  final?: Record<string, never>;
  control?: { req_resp?: boolean; local?: boolean };
  uuid?: string;
}

/** `FilesItem.PolicyType.NOW`: upload at once (what `wandb sync` uploads). */
export const FILES_POLICY_NOW = 0;
/** `FilesItem.FileType.MEDIA`. */
export const FILES_TYPE_MEDIA = 2;

let recordType: protobuf.Type | undefined;

function type(): protobuf.Type {
  recordType ??= protobuf
    .parse(WANDB_RECORD_PROTO, { keepCase: true })
    .root.lookupType("wandb_internal.Record");
  return recordType;
}

/** Serializes a record as W&B's protobuf `Record`. */
export function encodeRecord(record: RecordMessage): Uint8Array {
  const message = type().fromObject(record);
  return type().encode(message).finish();
}

/** Parses a serialized `Record` (unknown fields skipped); int64 values as numbers. */
export function decodeRecord(bytes: Uint8Array): RecordMessage {
  const message = type().decode(bytes);
  return type().toObject(message, {
    longs: Number,
    enums: Number,
    defaults: false,
    arrays: true,
  }) as RecordMessage;
}

/** Which record type a record holds. */
export function recordKind(record: RecordMessage): string {
  for (const kind of [
    "header",
    "run",
    "config",
    "history",
    "summary",
    "files",
    "artifact",
    "exit",
    "final",
  ] as const) {
    if (record[kind] !== undefined && record[kind] !== null) return kind;
  }
  return "unknown";
}
