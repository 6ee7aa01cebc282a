"""Local servers and recorded responses for the AWS provider tests."""
