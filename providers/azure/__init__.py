"""The Azure provider plugin (entry point ``azure``): GPU VMs through Azure Resource
Manager, offers from the public Retail Prices API. Importing this package does not import
the Azure SDK."""

from cloudgpu_providers.azure.provider import AzureProvider

__all__ = ["AzureProvider"]
