"""AWS EC2 provider plugin (entry point ``aws``). boto3 is imported lazily, inside
methods, so importing this package costs no SDK import."""

from cloudgpu_providers.aws.provider import AWSProvider

__all__ = ["AWSProvider"]
