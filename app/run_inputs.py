"""What a run is asked with: the prompt box, the Decoding panel and the Models panel, read
into a `RunRequest` when the run is queued (a change afterwards applies to the next run).

`RunInputs` is shared by Generate, Compare and the chat, so a policy profile chosen in the
Decoding panel reaches each of their runs; a method's own parameters come from
what Tune chose for it (app/method_params.py, the Sweep tab's store); an empty prompt is
refused here, at once, before anything runs, and a draft or head that just worked goes to the
top of its picker's recent list.
"""

from __future__ import annotations

from app.engine_api import RunRequest
from app.method_params import MethodParams
from app.session import Session
from app.widgets.decoding_panel import DecodingPanel
from app.widgets.models_panel import ModelsPanel
from app.widgets.prompt_panel import PromptPanel

EMPTY_PROMPT = "the prompt is empty; type a prompt (or open one with Ctrl+O)"


class RunInputs:
    def __init__(
        self,
        session: Session,
        prompt: PromptPanel,
        decoding: DecodingPanel,
        models: ModelsPanel,
        method_params: MethodParams,
    ) -> None:
        self.session, self.prompt, self.decoding, self.models = session, prompt, decoding, models
        self.method_params = method_params  # what Tune chose for a method's own parameters

    def method(self) -> str:
        return self.decoding.method_name()

    def prompt_text(self) -> str:
        return self.prompt.text()

    def set_prompt(self, text: str) -> None:
        self.prompt.set_text(text)

    def prompt_given(self) -> bool:
        if self.prompt.text().strip():
            return True
        self.session.report(EMPTY_PROMPT)
        return False

    def request(self, method: str, comparison: str = "") -> RunRequest:
        return RunRequest(
            method=method,
            prompt=self.prompt.text(),
            config=self.method_params.applied(method, self.decoding.config()),
            raw=self.prompt.raw.isChecked(),
            specs=self.models.specs(),
            comparison=comparison,
            policy_profile=self.decoding.profile_path(),
        )

    def target_spec(self) -> str:
        """The loaded target's spec ("" before a load): a reference is measured per target."""
        target = self.session.target
        return target.spec if target is not None else ""

    def remember_extra(self, method: str) -> None:
        """A draft / head / Medusa heads / speculator / MTP checkpoint that just worked goes to
        the top of its picker's recent list."""
        registries = self.session.registries
        info = registries.method(method) if registries is not None else None
        picker = self.models.extras.get(info.needs or "") if info is not None else None
        if picker is not None:
            picker.remember(picker.spec())
