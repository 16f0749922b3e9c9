"""Worker versioning: workers join a Temporal Worker Deployment as one version (build ID) of it, and the job
workflow is pinned, so a job runs to its end on the build that started it. Rollout (which version new jobs
go to) is Temporal's routing config, read and set here through its API; running jobs per version come from
visibility (`TemporalWorkerDeploymentVersion`), which the server keeps for every pinned run.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio.api.deployment.v1 import WorkerDeploymentInfo
from temporalio.api.enums.v1 import WorkerDeploymentVersionStatus
from temporalio.api.workflowservice.v1 import (
    DescribeWorkerDeploymentRequest,
    SetWorkerDeploymentCurrentVersionRequest,
    SetWorkerDeploymentRampingVersionRequest,
)
from temporalio.client import Client
from temporalio.common import VersioningBehavior, WorkerDeploymentVersion
from temporalio.worker import WorkerDeploymentConfig

from docjobs.settings.config import ConfigError
from docjobs.temporal.settings import TemporalSettings
from docjobs.temporal.visibility import SAFE_QUERY_VALUE


def deployment_config(settings: TemporalSettings) -> WorkerDeploymentConfig | None:
    """The worker's place in its Worker Deployment, pinning the workflows it runs; None: unversioned."""
    if settings.deployment is None:
        return None
    if settings.build_id is None:
        raise ConfigError("DOCJOBS_DEPLOYMENT is set without a build ID (DOCJOBS_BUILD_ID)")
    return WorkerDeploymentConfig(
        version=WorkerDeploymentVersion(settings.deployment, settings.build_id),
        use_worker_versioning=True,
        default_versioning_behavior=VersioningBehavior.PINNED,
    )


@dataclass(frozen=True)
class VersionState:
    build_id: str
    status: str  # Temporal's: current, ramping, draining, drained, inactive
    running_jobs: int


@dataclass(frozen=True)
class DeploymentState:
    name: str
    current: str | None  # build IDs
    ramping: str | None
    ramp_percent: float
    versions: list[VersionState]


class Deployments:
    """One Worker Deployment's routing, through the Temporal API (the `temporal worker deployment` commands)."""

    def __init__(self, client: Client, name: str) -> None:
        if "." in name or not SAFE_QUERY_VALUE.fullmatch(name):
            raise ConfigError("deployment name: letters, digits, '_', '@', '-' only")
        self.client = client
        self.name = name

    async def describe(self) -> WorkerDeploymentInfo:
        request = DescribeWorkerDeploymentRequest(namespace=self.client.namespace, deployment_name=self.name)
        response = await self.client.workflow_service.describe_worker_deployment(request)
        return response.worker_deployment_info

    async def running_jobs(self, build_id: str) -> int:
        """Running workflows pinned to (or last run by) `build_id`, as visibility sees them."""
        if not SAFE_QUERY_VALUE.fullmatch(build_id):
            raise ConfigError("build ID: letters, digits, '_', '.', '@', '-' only")
        version = f"{self.name}:{build_id}"
        query = f'TemporalWorkerDeploymentVersion = "{version}" AND ExecutionStatus = "Running"'
        return (await self.client.count_workflows(query)).count

    async def state(self) -> DeploymentState:
        info = await self.describe()
        routing = info.routing_config
        versions = [
            VersionState(
                build_id=summary.deployment_version.build_id,
                status=_status_name(summary.status),
                running_jobs=await self.running_jobs(summary.deployment_version.build_id),
            )
            for summary in info.version_summaries
        ]
        return DeploymentState(
            name=self.name,
            current=routing.current_deployment_version.build_id or None,
            ramping=routing.ramping_deployment_version.build_id or None,
            ramp_percent=routing.ramping_version_percentage,
            versions=versions,
        )

    async def promote(self, build_id: str) -> str | None:
        """Make `build_id` current: new jobs start on it. Returns the build it replaced."""
        request = SetWorkerDeploymentCurrentVersionRequest(
            namespace=self.client.namespace,
            deployment_name=self.name,
            build_id=build_id,
            identity=self.client.identity,
        )
        response = await self.client.workflow_service.set_worker_deployment_current_version(request)
        previous = response.previous_deployment_version.build_id
        return previous or None

    async def ramp(self, build_id: str | None, percent: float) -> None:
        """Send `percent` of new jobs to `build_id` (the rest to the current version); None ends the ramp."""
        request = SetWorkerDeploymentRampingVersionRequest(
            namespace=self.client.namespace,
            deployment_name=self.name,
            build_id=build_id or "",
            percentage=percent if build_id else 0.0,
            identity=self.client.identity,
        )
        await self.client.workflow_service.set_worker_deployment_ramping_version(request)

    async def rollback(self) -> str:
        """Route every new job to the good build: end a ramp if one is under way, else make the version that
        was current before the present one current again. Returns the build new jobs now go to."""
        info = await self.describe()
        routing = info.routing_config
        current = routing.current_deployment_version.build_id
        if routing.ramping_deployment_version.build_id:
            await self.ramp(None, 0.0)
            if current:
                return current
        earlier = [
            summary
            for summary in info.version_summaries
            if summary.HasField("last_current_time") and summary.deployment_version.build_id != current
        ]
        if not earlier:
            raise ConfigError(f"deployment {self.name}: no earlier current version to roll back to")
        previous = max(earlier, key=lambda summary: summary.last_current_time.ToNanoseconds())
        await self.promote(previous.deployment_version.build_id)
        return previous.deployment_version.build_id


def _status_name(status: WorkerDeploymentVersionStatus.ValueType) -> str:
    return WorkerDeploymentVersionStatus.Name(status).removeprefix("WORKER_DEPLOYMENT_VERSION_STATUS_").lower()
