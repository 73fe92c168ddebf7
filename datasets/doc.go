// Package datasets reads LLM request traces and request logs into
// servetrace request records (Read, Convert), writes buckets back out in
// public trace formats (Export), and bundles small real samples, with
// attribution, for the demo and the tests (Bundled).
//
// Read takes these formats (Formats; Detect names all but csv from the
// input's start), plain or gzip-, zstd- or bzip2-compressed (told by
// content, not name; a Git LFS pointer or an xz or zip file is ErrNotData):
//
//   - azure: Azure LLM inference trace CSV, 2023 and 2024; needs the
//     columns TIMESTAMP, ContextTokens and GeneratedTokens.
//   - mooncake: Mooncake JSONL; needs timestamp (ms from Options.Start),
//     input_length and output_length, and takes hash_ids (one per 512
//     tokens) as prefix blocks.
//   - burstgpt: BurstGPT CSV; needs Timestamp (seconds from the start),
//     Request tokens and Response tokens; Model, Log Type, Session ID and
//     Elapsed time are used where present.
//   - sharegpt: ShareGPT conversations, a JSON array or JSONL; needs
//     conversations of from/value turns, tokenized with LogOptions.Tokenizer;
//     it has no times, so turns are spaced ShareGPTGap apart.
//   - openai-log: OpenAI-style requests and responses, JSONL or JSON
//     documents spanning lines (one after another, or in an array), read
//     through a Mapping (MappingPresets: openai, litellm, helicone; or a
//     mapping file); needs ts, and usage or messages or a prompt to count.
//     A body logged as a JSON string is decoded.
//   - openai-batch: an OpenAI Batch API output file, through the
//     openai-batch mapping, with the request side joined by custom_id from
//     LogOptions.BatchInput.
//   - csv: CSV or TSV logs with a header, read through a mapping file whose
//     paths are column names; needs a ts column, and must be named.
//
// Export writes these formats (ExportFormats) from a bucket:
//
//   - azure: TIMESTAMP,ContextTokens,GeneratedTokens CSV, as Azure
//     publishes it.
//   - mooncake: Mooncake JSONL with ms timestamps from the bucket's anchor
//     (or first row), lengths and hash_ids (renumbered densely with
//     DenseIDs).
//   - vllm-custom: JSONL of synthetic prompts and output lengths for `vllm
//     bench serve --dataset-name custom`; needs the server's tokenizer.
package datasets
