package testenv

import (
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// AttrS returns the string attribute name of a DynamoDB item, or "".
func AttrS(m map[string]types.AttributeValue, name string) string {
	if v, ok := m[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// AttrN returns the number attribute name of a DynamoDB item, or 0.
func AttrN(m map[string]types.AttributeValue, name string) int64 {
	if v, ok := m[name].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}
