"""A verl-like step whose `compile` range on the main thread runs the same-name range
`compile_worker` on 8 worker threads at once (a compiler's parallel compile), and a
`gen` range with one worker-thread range that outlives it."""
import threading, time
import nvtx


def work(seconds: float) -> None:
    with nvtx.annotate("compile_worker"):
        time.sleep(seconds)


for step in range(2):
    with nvtx.annotate("step"):
        with nvtx.annotate("compile"):
            ts = [threading.Thread(target=work, args=(0.05,)) for _ in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
        with nvtx.annotate("gen"):
            late = threading.Thread(target=work, args=(0.03,))
            late.start()
            time.sleep(0.01)
        late.join()
        with nvtx.annotate("update_actor"):
            time.sleep(0.005)
