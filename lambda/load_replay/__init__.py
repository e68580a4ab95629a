"""The Lambda behind genai_pacer.benchmark.LoadReplay: plans a run, replays a worker's share, summarizes."""
