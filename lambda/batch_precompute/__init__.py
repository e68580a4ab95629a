"""Handlers behind genai_pacer.BatchPrecompute: a Bedrock batch inference run whose answers land in the answer store.

- `prepare`: writes each job's JSONL input (recordId = a hash of the normalized store key) and the
  recordId -> key mapping beside it, split by the per-file and per-job quotas; refuses a run below
  the per-job minimum with the numbers.
- `job_events`: completes the run's task token when EventBridge announces that a job ended.
- `load`: reads every `.jsonl.out` of a job, writes each answer with `pacer_runtime.answers`,
  reconciles the counts with `manifest.json.out` and lists the records without an answer in S3.
- `summary`: adds up the jobs of a run and names its outcome.

`records` holds the pure parts (record ids, the split, answer extraction) that need no AWS client.
"""
